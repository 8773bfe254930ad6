"""Short HTTP calls to a launch's own server (health, warm-up, tokenizer): one client per
process, straight to the server.

An HTTP(S)_PROXY in the environment is not for the pair's own addresses (trust_env off).
One client, not one per call: each new client builds a TLS context and loads the CA
bundle into it, 16 ms of CPU that an http:// server never uses (measured: 85 such calls
took 1.4 s of a paired cell's 7.6 s on a 2-core machine). No connection is kept between
calls: a server relaunched between them must not meet a stale one, and an idle one
would hold one of the server's HTTP threads.
"""

from __future__ import annotations

import functools
from typing import Any

import httpx


@functools.cache
def _client() -> httpx.Client:
    return httpx.Client(trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))


def get(url: str, timeout: float) -> httpx.Response:
    """GET url from a launch's server."""
    return _client().get(url, timeout=timeout)


def post(url: str, body: Any, timeout: float) -> httpx.Response:
    """POST body as JSON to url on a launch's server."""
    return _client().post(url, json=body, timeout=timeout)
