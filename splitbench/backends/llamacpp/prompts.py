"""The token pool prompts are drawn from (splitbench.backends.prompts), from
llama-server's own tokenizer."""

from __future__ import annotations

import httpx

from splitbench.backends.prompts import FILLER_TEXT, checked_pool


def token_pool(url: str) -> list[int]:
    """Token ids the served model produces for ordinary text (valid for any vocabulary)."""
    reply = httpx.post(f"{url}/tokenize", json={"content": FILLER_TEXT * 4}, timeout=30,
                       trust_env=False)
    reply.raise_for_status()
    return checked_pool(reply.json()["tokens"], url)
