"""Prompts of an exact token count that no cache can serve, for every backend.

A prompt is a list of token ids (the server then tokenizes nothing and adds no BOS): a
per-request nonce prefix drawn from the model's own tokens, then filler tokens.
Different nonces make every prompt differ from its first token, so no prefix cache hit
is possible even if caching were on. Each backend gets its pool of token ids from its
server's tokenizer (`token_pool`), from FILLER_TEXT.
"""

from __future__ import annotations

import random

NONCE_TOKENS = 8
FILLER_TEXT = (
    "The link between two machines carries activations forward and logits back; "
    "measure it before you blame it. "
)


def checked_pool(tokens: list, url: str) -> list[int]:
    """The token ids a tokenizer returned, refused when too few to draw nonces from."""
    pool = [t for t in tokens if isinstance(t, int)]
    if len(pool) < NONCE_TOKENS:
        raise RuntimeError(f"the server at {url} gave only {len(pool)} token ids to draw "
                           f"prompts from (at least {NONCE_TOKENS} are needed)")
    return pool


def prompt(pool: list[int], length: int, nonce: int) -> list[int]:
    """Exactly `length` token ids, starting with a nonce-specific prefix."""
    rng = random.Random(nonce)
    head = [rng.choice(pool) for _ in range(min(NONCE_TOKENS, length))]
    body = (pool * (length // len(pool) + 1))[: length - len(head)]
    return head + body
