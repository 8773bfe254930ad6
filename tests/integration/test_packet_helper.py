"""The packet helper: a user who is not root counts the RPC turns from the packets, as
root does, through a helper that root installed for that user alone."""

from __future__ import annotations

import grp
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from splitbench.infra import packet_helper
from splitbench.infra.port_blocks import FIRST_PORT, LAST_PORT
from tests.conftest import ROOT, needs_root

pytestmark = [pytest.mark.slow, needs_root()]  # root installs it; users run it

# Run as the user: request-response turns (argv[3] of them) to a listener on 127.0.0.1 at
# a port of splitbench's blocks, counted by the turn counter from the packets; prints the
# count (None: no packet socket) and the socket's receive buffer.
USER_SIDE = r"""
import socket, sys, threading, time
from pathlib import Path
from splitbench.infra import packet_helper, rpc_turns
packet_helper.HELPER_DIR = Path(sys.argv[1])
rpc_turns.RECEIVE_BUFFER = int(sys.argv[4])
server = socket.create_server(("127.0.0.1", int(sys.argv[2])))
port = server.getsockname()[1]
counter = rpc_turns.TurnCounter.open("127.0.0.1", [port])
def echo():
    conn, _ = server.accept()
    while data := conn.recv(64):
        conn.sendall(b"pong")
threading.Thread(target=echo, daemon=True).start()
start = time.monotonic_ns()
with socket.create_connection(("127.0.0.1", port)) as client:
    for _ in range(int(sys.argv[3])):
        client.sendall(b"ping")
        client.recv(64)
        time.sleep(0.0005)  # a decode step's pace: the lab's fastest is 0.5 ms a token
if counter is None:
    print("None", 0)
else:
    buffer = counter.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    counter.finish()
    print(counter.turns(start, time.monotonic_ns()), buffer)
"""

# Run as the user: a filter of its own that keeps every packet, then traffic on a port of
# the blocks and on one outside them, and what the socket showed; then an attempt to
# replace the filter and one to take it off.
SNIFFER = r"""
import ctypes, json, select, socket, struct, sys, time
from pathlib import Path
from splitbench.infra import packet_helper, packets
packet_helper.HELPER_DIR = Path(sys.argv[1])
keep_all = packets.instruction(packets.RET, 0, 0, 0xFFFF)
sock = packet_helper.open_socket(keep_all, 0)
if sock is None:
    print(json.dumps(None)); sys.exit()
sock.setblocking(False)
ports = {}
for name, port in (("inside", int(sys.argv[2])), ("outside", 0)):
    server = socket.create_server(("127.0.0.1", port))
    ports[name] = server.getsockname()[1]
    with socket.create_connection(("127.0.0.1", ports[name])) as client:
        conn, _ = server.accept()
        client.sendall(b"secret")
        conn.recv(64)
        conn.close()
    server.close()
time.sleep(0.2)
seen = set()
while select.select([sock], [], [], 0)[0]:
    packet = sock.recv(128)
    if packet[0] >> 4 == 4:
        header = (packet[0] & 15) * 4
        seen.update(struct.unpack_from("!HH", packet, header))
refused = {}
for name, option, value in (("replace", packets.SO_ATTACH_FILTER, None),
                            ("remove", 27, 0)):  # SO_DETACH_FILTER
    try:
        if value is None:
            code = ctypes.create_string_buffer(keep_all, len(keep_all))
            value = struct.pack("HL", 1, ctypes.addressof(code))
        sock.setsockopt(socket.SOL_SOCKET, option, value)
        refused[name] = False
    except PermissionError:
        refused[name] = True
print(json.dumps({"ports": ports, "inside_seen": ports["inside"] in seen,
                  "outside_seen": ports["outside"] in seen, "refused": refused},
                 separators=(",", ":")))
"""


def free_block_port() -> int:
    """A port of splitbench's blocks that nothing listens on now."""
    for port in range(LAST_PORT, FIRST_PORT, -1):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in the blocks")


def as_user(uid: int, gid: int, helper_dir: Path, script: str = USER_SIDE,
            turns: int = 3, buffer: int = 64 << 20) -> list[str]:
    """What `script` printed, run as uid:gid with no other group and no capability
    (USER_SIDE: `turns` of them, the turn counter asking for `buffer` bytes)."""
    done = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
         sys.executable, "-c", script, str(helper_dir), str(free_block_port()), str(turns),
         str(buffer)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": "/"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


@pytest.fixture
def helper_dir(monkeypatch):
    """A helper directory every user may search (tmp_path's parents are root's alone),
    and the helper's group nobody's own (nogroup): the test changes no group of the
    machine's."""
    path = Path(tempfile.mkdtemp(prefix="sb-helper-", dir="/tmp"))
    path.chmod(0o755)
    monkeypatch.setattr(packet_helper, "HELPER_DIR", path)
    monkeypatch.setattr(packet_helper, "GROUP", grp.getgrgid(65534).gr_name)
    monkeypatch.setattr(packet_helper, "_group_with", lambda user: None)
    yield path
    shutil.rmtree(path)


def test_a_user_counts_the_turns_through_the_helper_and_no_other_user_can(helper_dir):
    # Without a helper, the user has no packet socket: nothing is counted.
    assert as_user(65534, 65534, helper_dir)[0] == "None"
    helper = packet_helper.install("nobody")
    assert helper.parent == helper_dir and helper.name.startswith("packet-socket-")
    assert helper.name.endswith(f"-{FIRST_PORT}-{LAST_PORT}")
    stat = helper.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) == (0, 65534, 0o750)
    caps = subprocess.run(["getcap", str(helper)], capture_output=True, text=True).stdout
    assert caps.strip().endswith(" cap_net_raw=ep"), caps  # no cap_net_admin
    # The user it was installed for: the three turns, counted from the packets, in a
    # buffer no larger than an unprivileged socket may have (the kernel reports twice
    # net.core.rmem_max), read by a thread while the turns ran.
    turns, buffer = as_user(65534, 65534, helper_dir)
    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    assert turns == "3" and int(buffer) <= 2 * rmem_max, (turns, buffer)
    # With 128 KiB (the most a host with Debian's net.core.rmem_max of 208 KiB gives),
    # 3,000 turns at a decode step's pace are 6,000 segments, many times what the buffer
    # holds (each is charged its whole buffer): all counted, because the counter reads
    # while they run.
    assert as_user(65534, 65534, helper_dir, turns=3000, buffer=128 << 10)[0] == "3000"
    # Another user (daemon, not in the group) may not run it: nothing counted.
    assert as_user(1, 1, helper_dir)[0] == "None"
    assert packet_helper.remove() == [helper] and not helper.exists()


def test_the_helpers_socket_shows_only_the_blocks_ports_and_keeps_its_filter(helper_dir):
    """A user of the helper who asks for every packet gets the segments of a port in
    splitbench's blocks and none of a port outside them, and can neither replace the
    filter nor take it off."""
    packet_helper.install("nobody")
    (found,) = as_user(65534, 65534, helper_dir, SNIFFER)
    found = json.loads(found)
    assert not FIRST_PORT <= found["ports"]["outside"] <= LAST_PORT, found
    assert found["inside_seen"] and not found["outside_seen"], found
    assert found["refused"] == {"replace": True, "remove": True}, found


def test_the_helper_refuses_a_program_that_is_not_one(helper_dir):
    helper = packet_helper.install("nobody")
    for program in ("", "zz" * 8, "00" * 7):
        done = subprocess.run([str(helper), "3", "0", program], capture_output=True,
                              text=True, timeout=10)
        assert done.returncode == 2 and "PROGRAM must be" in done.stderr, done.stderr


def test_root_is_told_the_commands_and_the_copy_they_compile():
    lines = packet_helper.install_commands("alice")
    target = packet_helper.path()
    copy = packet_helper.HELPER_DIR / "packet_socket.c"
    assert f"install -o root -g root -m 0644 {packet_helper.SOURCE} {copy}" in lines
    assert any(line.startswith(f"cc -O2 -DFIRST_PORT={FIRST_PORT} -DLAST_PORT={LAST_PORT} "
                               f"-o {target}.new {copy}") for line in lines), lines
    assert "usermod -a -G splitbench-packets alice" in lines
    assert lines[-1] == f"setcap cap_net_raw+ep {target}.new && mv {target}.new {target}"


def test_installing_it_names_a_user_that_does_not_exist(helper_dir):
    with pytest.raises(packet_helper.HelperError, match="no user 'no-such-user'"):
        packet_helper.install("no-such-user")
    assert list(helper_dir.iterdir()) == []
