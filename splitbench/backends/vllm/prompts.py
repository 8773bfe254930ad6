"""The token pool prompts are drawn from (splitbench.backends.prompts), from the vLLM
server's own tokenizer."""

from __future__ import annotations

import httpx

from splitbench.backends.prompts import FILLER_TEXT, checked_pool
from splitbench.backends.vllm.client import SERVED_NAME


def token_pool(url: str) -> list[int]:
    """Token ids the served model produces for ordinary text (valid for any vocabulary)."""
    reply = httpx.post(f"{url}/tokenize", json={"model": SERVED_NAME,
                                                "prompt": FILLER_TEXT * 4,
                                                "add_special_tokens": False}, timeout=30,
                       trust_env=False)
    reply.raise_for_status()
    return checked_pool(reply.json()["tokens"], url)
