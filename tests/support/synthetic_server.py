"""Pieces of the synthetic streaming servers that the client's tests and its benchmark
stand up on loopback (not used when measuring)."""

from __future__ import annotations

import json
import socket
from typing import Any


def read_request(conn: socket.socket) -> dict[str, Any]:
    """Read one HTTP request with a Content-Length body; return the body's JSON."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += conn.recv(65536)
    return json.loads(body)
