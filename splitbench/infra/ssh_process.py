"""A command on a remote host over one SSH channel, used like subprocess.Popen
(`ssh.popen` starts one)."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import threading
import time
from typing import IO, Any

import paramiko


class _Stdin:
    """The remote command's stdin: closing it sends EOF (the command reads to its end)."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel

    def write(self, data: str | bytes) -> int:
        raw = data.encode() if isinstance(data, str) else data
        self._channel.sendall(raw)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self._channel.closed:
            with contextlib.suppress(paramiko.SSHException, OSError, EOFError):
                self._channel.shutdown_write()


class RemoteProcess:
    """A command on a remote host over one SSH channel, used like subprocess.Popen.

    stdout: None or subprocess.DEVNULL (discarded), subprocess.PIPE (then `.stdout` is a
    text file read line by line, `select`-able: a local pipe fed from the channel), or an
    open file (its descriptor receives the output, as a child's would). stderr is
    discarded. stdin=True: `.stdin.close()` sends EOF. `terminate()`/`kill()` close the
    channel: the remote command sees its stdin end and its next write fail, as when an
    ssh client is killed. `pid` is None: the process is not on this machine.
    """

    pid = None

    def __init__(self, channel: paramiko.Channel, args: list[str], *, stdout: Any = None,
                 stdin: bool = False) -> None:
        self.args = args
        self.returncode: int | None = None
        self._channel = channel
        self._closed_by_us: int | None = None
        self.stdin = _Stdin(channel) if stdin else None
        self.stdout: IO[str] | None = None
        self._sink: int | None = None
        self._own_sink = False
        if stdout is subprocess.PIPE:
            read, self._sink = os.pipe()
            self._own_sink = True
            self.stdout = open(read, encoding="utf-8", errors="replace")  # noqa: SIM115
        elif stdout not in (None, subprocess.DEVNULL):
            stdout.flush()
            self._sink = stdout.fileno()
        # Made here, before anyone can close the channel (which closes it too).
        self._ready = channel.fileno()
        self._pump = threading.Thread(target=self._copy, daemon=True,
                                      name=f"ssh-{args[0] if args else 'process'}")
        self._pump.start()

    def _copy(self) -> None:
        channel = self._channel  # bytes go through as they are; the reader decodes
        try:
            while True:
                if channel.recv_ready():
                    self._write(channel.recv(65536))
                elif channel.recv_stderr_ready():
                    channel.recv_stderr(65536)
                elif channel.closed or channel.eof_received:
                    break
                else:
                    select.select([self._ready], [], [], 1.0)
        except (paramiko.SSHException, OSError, EOFError, ValueError):
            pass
        finally:
            if self._own_sink and self._sink is not None:
                os.close(self._sink)
            self._sink = None

    def _write(self, data: bytes) -> None:
        while data and self._sink is not None:
            try:
                done = os.write(self._sink, data)
            except BrokenPipeError:
                return  # the reader is gone: discard the rest
            data = data[done:]

    def poll(self) -> int | None:
        if self.returncode is None and not self._pump.is_alive() and (
                self._channel.exit_status_ready() or self._channel.closed):
            self.returncode = self._status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._pump.join(timeout)
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._channel.status_event.wait(0.1)
        return self.returncode  # type: ignore[return-value]

    def _status(self) -> int:
        if self._channel.exit_status_ready() and self._channel.exit_status != -1:
            return self._channel.exit_status
        return self._closed_by_us if self._closed_by_us is not None else -1

    def _close(self, code: int) -> None:
        if self._closed_by_us is None and self.returncode is None:
            self._closed_by_us = code
        self._channel.close()

    def terminate(self) -> None:
        self._close(-15)

    def kill(self) -> None:
        self._close(-9)

    def send_signal(self, sig: int) -> None:
        self._close(-int(sig))
