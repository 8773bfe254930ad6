"""The onetrip backend's two processes, standard library only.

`worker ADDR PORT` (host B): echoes every byte it receives, on B's link address.
`front PORT WORKER_ADDR WORKER_PORT MODEL_DIR TOKEN_BYTES` (host A, on 127.0.0.1): its
own HTTP API (api.py: /health, /vocabulary from the model's vocabulary.json, streaming
/generate). It holds one connection to the worker for its whole life (requests take
turns on it): a request's prompt crosses to B and back once (4 bytes a token), then each
generated token is one round trip of TOKEN_BYTES, a decode step that costs exactly one
round trip of the link.
"""

from __future__ import annotations

import json
import pathlib
import socket
import socketserver
import sys
import threading
import time

# Each decode step computes on A for this long before its round trip, as a real
# server's step does: the client's reads of the traffic counters at its first token fall
# inside a step's compute, not in the middle of the next round trip.
STEP_COMPUTE_S = 0.001


class Worker(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := self.request.recv(65536):
            self.request.sendall(data)


def exchange(sock: socket.socket, size: int) -> None:
    """Send `size` bytes to the worker and wait until they are all back."""
    sock.sendall(b"x" * size)
    back = 0
    while back < size:
        chunk = sock.recv(size - back)
        if not chunk:
            raise ConnectionError("the worker closed the connection")
        back += len(chunk)


class Front(socketserver.StreamRequestHandler):
    worker: socket.socket
    vocabulary: list[int]
    token_bytes: int
    turn = threading.Lock()  # one exchange on the worker's connection at a time

    def handle(self) -> None:
        request = self.rfile.readline().decode("latin-1").split()
        headers = {}
        while (line := self.rfile.readline().decode("latin-1").strip()):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = self.rfile.read(int(headers.get("content-length", 0)))
        path = request[1] if len(request) > 1 else "/"
        if path == "/health":
            self.reply({"status": "ok"})
        elif path == "/vocabulary":
            self.reply({"ids": self.vocabulary})
        elif path == "/generate":
            self.generate(json.loads(body))
        else:
            self.reply({"error": {"message": f"no {path}"}}, status="404 Not Found")

    def reply(self, payload: dict, status: str = "200 OK") -> None:
        data = json.dumps(payload).encode()
        self.wfile.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                         .encode() + data)

    def generate(self, body: dict) -> None:
        prompt, n_predict = body["prompt"], body["tokens"]
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Connection: close\r\n\r\n")
        started = time.perf_counter()
        with self.turn:
            exchange(self.worker, 4 * len(prompt))  # prefill: the prompt there and back
        prompt_ms = (time.perf_counter() - started) * 1000
        first = None
        for i in range(n_predict):
            time.sleep(STEP_COMPUTE_S)
            with self.turn:
                exchange(self.worker, self.token_bytes)
            now = time.perf_counter()
            first = first or now
            self.event({"id": self.vocabulary[i % len(self.vocabulary)], "n": i + 1,
                        "decode_ms": (now - first) * 1000})
        self.event({"done": True, "prompt_n": len(prompt), "prompt_ms": prompt_ms,
                    "n": n_predict, "decode_ms": ((now - first) * 1000) if first else 0.0})

    def event(self, payload: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv: list[str]) -> None:
    role, *rest = argv
    if role == "worker":
        addr, port = rest
        Server((addr, int(port)), Worker).serve_forever()
    elif role == "front":
        port, worker_addr, worker_port, model_dir, token_bytes = rest
        vocabulary = pathlib.Path(model_dir) / "vocabulary.json"
        Front.vocabulary = json.loads(vocabulary.read_text())
        Front.token_bytes = int(token_bytes)
        Front.worker = socket.create_connection((worker_addr, int(worker_port)))
        Front.worker.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        Server(("127.0.0.1", int(port)), Front).serve_forever()
    else:
        sys.exit("usage: server.py worker ADDR PORT | front PORT WORKER_ADDR WORKER_PORT "
                 "MODEL_DIR TOKEN_BYTES")


if __name__ == "__main__":
    main(sys.argv[1:])
