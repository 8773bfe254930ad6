"""The packet helper: a user who is not root counts the RPC turns from the packets, as
root does, through a helper that root installed for that user alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from splitbench.infra import packet_helper
from tests.conftest import ROOT, needs_root

pytestmark = [pytest.mark.slow, needs_root()]  # root installs it; users run it

# Run as the user: three request-response turns to a listener on 127.0.0.1, counted by
# the turn counter from the packets; prints the count (None: no packet socket) and the
# socket's receive buffer.
USER_SIDE = r"""
import socket, sys, threading, time
from pathlib import Path
from splitbench.infra import packet_helper, rpc_turns
packet_helper.HELPER_DIR = Path(sys.argv[1])
server = socket.create_server(("127.0.0.1", 0))
port = server.getsockname()[1]
counter = rpc_turns.TurnCounter.open("127.0.0.1", [port])
def echo():
    conn, _ = server.accept()
    while data := conn.recv(64):
        conn.sendall(b"pong")
threading.Thread(target=echo, daemon=True).start()
start = time.monotonic_ns()
with socket.create_connection(("127.0.0.1", port)) as client:
    for _ in range(3):
        client.sendall(b"ping")
        client.recv(64)
if counter is None:
    print("None", 0)
else:
    buffer = counter.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    counter.finish()
    print(counter.turns(start, time.monotonic_ns()), buffer)
"""


def as_user(uid: int, gid: int, helper_dir: Path) -> list[str]:
    """What USER_SIDE printed, run as uid:gid with no other groups and no capability."""
    done = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
         sys.executable, "-c", USER_SIDE, str(helper_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": "/"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


@pytest.fixture
def helper_dir(monkeypatch):
    """A helper directory every user may search (tmp_path's parents are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="sb-helper-", dir="/tmp"))
    path.chmod(0o755)
    monkeypatch.setattr(packet_helper, "HELPER_DIR", path)
    yield path
    shutil.rmtree(path)


def test_a_user_counts_the_turns_through_the_helper_and_no_other_user_can(helper_dir):
    # Without a helper, the user has no packet socket: nothing is counted.
    assert as_user(65534, 65534, helper_dir)[0] == "None"
    helper = packet_helper.install("nobody")
    assert helper.parent == helper_dir and helper.name.startswith("packet-socket-")
    stat = helper.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) == (0, 65534, 0o750)
    caps = subprocess.run(["getcap", str(helper)], capture_output=True, text=True).stdout
    assert "cap_net_admin,cap_net_raw=ep" in caps, caps
    # The user it was installed for: the three turns, counted from the packets, in a
    # buffer of the size asked for (the kernel reports twice what it was given), past
    # the 208 KiB an unprivileged socket may have.
    turns, buffer = as_user(65534, 65534, helper_dir)
    assert turns == "3" and int(buffer) >= 64 << 20, (turns, buffer)
    # Another user (daemon, not in nobody's group) may not run it: nothing counted.
    assert as_user(1, 1, helper_dir)[0] == "None"
    assert packet_helper.remove() == [helper] and not helper.exists()


def test_installing_it_names_a_user_that_does_not_exist(helper_dir):
    with pytest.raises(packet_helper.HelperError, match="no user 'no-such-user'"):
        packet_helper.install("no-such-user")
    assert list(helper_dir.iterdir()) == []
