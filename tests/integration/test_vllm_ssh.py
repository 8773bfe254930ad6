"""vLLM across a pair in mode ssh, for real: host A and host B are namespaces of their
own (each with its own /dev/shm, as two machines have), B reached only through a real
sshd. Host A is where splitbench runs, so the launch runs in a process inside A's
namespace; rank 0's rendezvous store, which listens on every address of host A, then
listens only inside it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from splitbench.backends.vllm.servers import PRIVATE_SHM
from splitbench.infra import procs, ssh
from tests.conftest import ROOT, needs_root
from tests.integration.test_ssh import sh, start_sshd
from tests.integration.test_vllm import SHAPE, VENV

NS_A, NS_B = "sb-vsa", "sb-vsb"
IF_A, IF_B = "sbvs-a", "sbvs-b"
ADDR_A, ADDR_B = "10.214.11.1", "10.214.11.2"

pytestmark = [
    pytest.mark.slow,  # vLLM's two ranks, sshd
    pytest.mark.timeout(600),
    needs_root(),
    pytest.mark.skipif(not (ROOT / ".venv-vllm/bin/vllm").exists(),
                       reason="vLLM not installed (./bootstrap.sh vllm)"),
]

# Runs as host A: the launch over SSH, one request, the stop; prints what it saw.
HOST_A = """
import json, sys
from pathlib import Path
from splitbench import models, plan
from splitbench.backends import lifecycle
from splitbench.backends.prompts import prompt
from splitbench.backends.vllm import api, hf_model, servers, toolchain
from splitbench.infra import procs, telemetry, teardown
from splitbench.links import real
from splitbench.configuration import parsed
spec, shape, venv, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
# The launch's settings come from the model's section (the pair's own is the spec's).
config = {"pairs": {"sv": {"mode": "embedded", "hosts": {"a": {}, "b": {}},
                           "links": {"plain": {}}}},
          "baseline_link": "plain", "toolchain": {"source": "pip"},
          "models": {"m": {"synthetic": shape, "backend": "vllm",
                           "vllm": {"tensor_parallel": 2, "launch_timeout_s": 300,
                                    "extra_args": ["--enforce-eager"]}}},
          "contexts": {"short": 32}, "concurrency": [1], "cell": {"n_predict": 32},
          "measurement_version": 1}
result, link = {}, None
try:
    link = real.ensure(spec)
    # Another program's file on B with a vLLM-like name (and a space): never removed.
    link.host_b.run(["sh", "-c", 'echo x > "/dev/shm/psm_other results"'])
    tools = toolchain.record("sv", spec["hosts"], venv, Path(out) / "tools.json")
    result["tools"] = tools["status"]
    hf_model.write_synthetic_hf(shape, Path(out) / "m.hf")
    model = models.describe({"synthetic": shape, "backend": "vllm"}, Path(out) / "m.hf")
    server = servers.ensure(link, plan.server_slice(parsed(config), "m"), model["path"],
                            model["sha256"], tools)
    rank1 = procs.find(server.record["proc_keys"][1])
    result.update(connections=server.record["link_connections"],
                  rank1_remote=bool(rank1.get("remote")), rank1_host=rank1.get("host"),
                  cleanup=server.record["cleanup"])
    ids = prompt(api.token_pool(server.url), 32, 3)
    traffic = telemetry.RpcTraffic(link.addr_b, None)
    reply = api.run_concurrent(server.url, [ids], 32, 120, traffic.at_first_token)[0]
    traffic.finish()
    row = api.request_row(reply, 32, 32, True, 1.0)
    result.update(status=row["status"], tokens=row["generated_tokens"],
                  bytes_a_to_b=traffic.figures([t["t_mono_ns"] for t in reply.tokens])[
                      "rpc_bytes_per_token_a_to_b"])
finally:
    lifecycle.stop("sv")
    teardown.teardown()
if link is not None:
    # Teardown took A's address off the link, and this lab reaches B's sshd over that
    # link: put it back to look, then take it off again.
    link = real.ensure(spec)
    result["shm_left_b"] = link.host_b.run(["ls", "-A", "/dev/shm"]).stdout.splitlines()
    teardown.teardown()
print("RESULT " + json.dumps(result))
"""


@pytest.fixture
def two_namespaces(state_dir, tmp_path):
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        sh("ip", "netns", "add", ns)
        procs.record_namespace(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "-n", NS_A, "link", "add", IF_A, "type", "veth", "peer", "name", IF_B,
       "netns", NS_B)
    sh("ip", "-n", NS_B, "addr", "add", f"{ADDR_B}/30", "dev", IF_B)
    sh("ip", "-n", NS_B, "link", "set", IF_B, "up")
    host_b = start_sshd(NS_B, ADDR_B, tmp_path, wrap=PRIVATE_SHM)
    yield host_b
    ssh.close_all()


def test_vllm_runs_across_a_pair_over_ssh_and_leaves_nothing_on_b(two_namespaces, tmp_path):
    host_b = {**two_namespaces, "vllm_venv": VENV}
    spec = {"pair": "sv", "link": "veth", "mode": "ssh", "hosts": {"a": {}, "b": host_b},
            "interface_a": IF_A, "interface_b": IF_B, "addr_a": ADDR_A, "addr_b": ADDR_B,
            "prefix": 30}
    started = time.monotonic()
    run = subprocess.run(
        ["ip", "netns", "exec", NS_A, *PRIVATE_SHM, sys.executable, "-c", HOST_A,
         json.dumps(spec), json.dumps(SHAPE), str(VENV), str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={"SPLITBENCH_STATE": str(tmp_path / "state-a"), "PATH": "/usr/sbin:/usr/bin:/bin"})
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, (run.stdout + run.stderr)[-4000:]
    result = json.loads(lines[-1][7:])
    assert result.get("tools") == "ok" and result.get("status") == "ok", \
        (result, run.stderr[-3000:])
    assert result["rank1_remote"] and result["rank1_host"] == "b"  # started through sshd
    assert result["connections"] > 0 and result["bytes_a_to_b"] > 1000
    assert result["tokens"] == 32
    # Nothing of the launch is left on B: its processes (only sshd runs there) and its
    # scratch directory.
    left = subprocess.run(["ip", "netns", "pids", NS_B], capture_output=True,
                          text=True).stdout.split()
    commands = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                for p in left if p.isdigit()]
    assert all("sshd" in c for c in commands), commands
    scratch = [p for c in result["cleanup"] for p in c["paths"]]
    assert scratch and not any(subprocess.run(["test", "-e", p]).returncode == 0
                               for p in scratch), scratch
    # /dev/shm: host A (this machine, not a namespace: a real host) recorded the files
    # its rank's processes mapped (vLLM's shared-memory broadcast); B's rank, a headless
    # remote rank, maps none. On B nothing of the launch is left, and the other
    # program's file is still there.
    mapped_a = [p for c in result["cleanup"] if not c["host"].get("ssh") for p in c["shm"]]
    assert mapped_a and all(p.startswith("/dev/shm/psm_") for p in mapped_a), \
        result["cleanup"]
    assert result["shm_left_b"] == ["psm_other results"], result["shm_left_b"]
    assert time.monotonic() - started < 600
