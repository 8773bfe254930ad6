"""How much of a remote command's output `ssh.run` keeps: its last OUTPUT_KEPT_BYTES per
stream, and a note of what was cut, whatever the host prints (a fake channel here; the
transport itself is tested against a real sshd in tests/integration/test_ssh.py)."""

from __future__ import annotations

import os
import threading

from splitbench.infra import ssh

CHUNK = 65536


class FloodingChannel:
    """A session channel whose command prints `size` bytes on stdout (the last line
    "end"), a short stderr, then exits 0."""

    def __init__(self, size: int) -> None:
        body = b"x" * (size - 4) + b"end\n"
        self._out = [body[i:i + CHUNK] for i in range(0, len(body), CHUNK)]
        self._err = [b"warning\n"]
        self.closed = False
        self.eof_received = False
        self.status_event = threading.Event()
        self.status_event.set()
        self._read, self._write = os.pipe()
        os.write(self._write, b"!")  # always readable: run never waits on it

    def exec_command(self, command: str) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def fileno(self) -> int:
        return self._read

    def recv_ready(self) -> bool:
        return bool(self._out)

    def recv(self, size: int) -> bytes:
        data = self._out.pop(0)
        self.eof_received = not self._out and not self._err
        return data

    def recv_stderr_ready(self) -> bool:
        return bool(self._err)

    def recv_stderr(self, size: int) -> bytes:
        data = self._err.pop(0)
        self.eof_received = not self._out and not self._err
        return data

    def exit_status_ready(self) -> bool:
        return self.eof_received

    def recv_exit_status(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True
        os.close(self._read)
        os.close(self._write)


def run_flooding(monkeypatch, size: int):
    monkeypatch.setattr(ssh, "_session", lambda target: FloodingChannel(size))
    monkeypatch.setattr(ssh, "resolve", lambda spec: None)
    return ssh.run({"ssh": "b"}, ["cat", "big"], timeout=30)


def test_a_flood_keeps_its_last_bytes_and_says_how_many_were_cut(monkeypatch):
    size = 3 * ssh.OUTPUT_KEPT_BYTES + 12345
    result = run_flooding(monkeypatch, size)
    note, kept = result.stdout.split("\n", 1)
    cut = size - ssh.OUTPUT_KEPT_BYTES
    assert note == (f"[splitbench: the first {cut} bytes of this output were cut; its last "
                    f"{ssh.OUTPUT_KEPT_BYTES} are kept]")
    assert len(kept) == ssh.OUTPUT_KEPT_BYTES and kept.endswith("xend\n")
    assert result.stderr == "warning\n" and result.returncode == 0


def test_output_within_the_limit_is_whole_and_unmarked(monkeypatch):
    result = run_flooding(monkeypatch, ssh.OUTPUT_KEPT_BYTES)
    assert len(result.stdout) == ssh.OUTPUT_KEPT_BYTES
    assert result.stdout.endswith("xend\n") and not result.stdout.startswith("[")
