"""The SSH path for real: an sshd in a namespace of our own plays host B.

Host A is this machine's own network stack; host B is a namespace joined to it by a
veth pair, reached only through a real OpenSSH server with a known host key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from splitbench.backends import lifecycle
from splitbench.backends.llamacpp import gguf_model, toolchain
from splitbench.cells import measure
from splitbench.infra import parquet_io, procs, ssh, teardown, telemetry, wakeup
from splitbench.infra.hosts import Host, HostError, host_from_spec
from splitbench.links import real, verify
from tests.support import commands_in
from tests.support.gpu import nvml_says
from tests.support.lab import LINK_CHECK
from tests.support.ssh_b import ADDR_A, ADDR_B, IF_A, IF_B, NEEDS, NS, PORT, link_spec, sh
from tests.support.workflow_run import NO_SOCKPERF, SNAKEMAKE, workflow_copy

pytestmark = NEEDS


def test_ssh_quotes_every_argument_and_verifies_the_host_key(host_b):
    # A's end must be up before B is reachable at all.
    real.ensure(link_spec(host_b))
    host = host_from_spec("b", host_b)
    hostile = "a b; touch /tmp/sb-pwned $(id)"
    assert host.run(["echo", hostile]).stdout.strip() == hostile
    assert not Path("/tmp/sb-pwned").exists()
    stranger = Host("b", ssh=host_b["ssh"], ssh_port=PORT, identity=host_b["identity"],
                    known_hosts=str(Path(host_b["known_hosts"]).with_name("empty")))
    Path(stranger.known_hosts).write_text("")
    with pytest.raises(HostError, match=r"host b: ssh to root@10\.214\.9\.2 failed.*"
                                        r"(verification failed|known_hosts|No \w+ host key)"):
        stranger.run(["true"])


def test_remote_process_is_recorded_and_stopped(host_b, state_dir):
    """Stopped, and its log (a file mktemp made on B) brought back to A and removed from
    B; a path on B that the record does not name as its log is never removed."""
    real.ensure(link_spec(host_b))
    host = host_from_spec("b", host_b)
    record = host.spawn(["sh", "-c", "echo said-on-b; exec sleep 300"], role="other",
                        key="remote-sleep", log_path=Path("/unused"))
    log = record["remote_log"]
    assert log.startswith("/tmp/splitbench-remote-sleep."), log
    assert procs.is_alive(record)
    procs.stop("remote-sleep")
    assert not procs.is_alive(record)
    assert host.run(["test", "-e", log], check=False).returncode == 1, "left on B"
    assert "said-on-b" in (procs.remote_logs_dir() / "remote-sleep.log").read_text()

    other = host.run(["mktemp", "/tmp/not-splitbench-XXXXXXXX"]).stdout.strip()
    try:
        for named in (other, f"/tmp/splitbench-x/../{other.removeprefix('/tmp/')}"):
            stray = host.spawn(["sleep", "300"], role="other", key="remote-stray",
                               log_path=Path("/unused"))
            procs.record_process({**procs.find("remote-stray"), "remote_log": named})
            procs.stop("remote-stray")
            assert not procs.is_alive(stray)
            assert host.run(["test", "-e", other], check=False).returncode == 0, named
            host.run(["rm", "-f", "--", stray["remote_log"]])
    finally:
        host.run(["rm", "-f", "--", other])


def test_link_over_ssh_is_set_up_proved_and_measured(host_b, tmp_path):
    spec = link_spec(host_b, mtu=1400)
    out = tmp_path / "veth.parquet"
    settings = {**LINK_CHECK, "iperf_seconds": 1, "rr_samples": 40,
                "rr_sizes": [64, 16384, 65536], **NO_SOCKPERF}
    row = verify.verify(spec, settings, out).iloc[0]
    # Left out as asked (the tiny run times it): no sockperf figure, server or command.
    assert "sockperf16k_p50_us" not in row and row["sockperf_version"] is None
    assert not any(argv[0] == "sockperf" for argv in
                   parquet_io.provenance(out)["commands"])
    assert row["route_dev_a"] == IF_A
    assert row["mtu_a"] == 1400 and row["mtu_b"] == 1400
    assert row["a_to_b_gbps"] > 0.1 and row["b_to_a_gbps"] > 0.1
    assert row["interface_tx_bytes"] > 0
    assert row["rr16k_p50_us"] > 0 and row["emulation_mode"] == "real"
    assert pd.read_parquet(out)["link"].iloc[0] == "veth"
    assert not any(p["role"] in ("iperf3", "probe", "sockperf") for p in procs.all_procs())

    # What setup changed is undone at teardown, and only that: A's end was down, with no
    # address and MTU 1500; B's end was up with its address (sshd listens on it).
    sshd = procs.find("sshd-test")
    teardown.teardown(spare=["sshd-test"])  # sshd holds B's namespace, and answers
    a_end = json.loads(subprocess.run(["ip", "-j", "addr", "show", "dev", IF_A],
                                      capture_output=True, text=True, check=True).stdout)[0]
    # B was reached over the link itself: with A's address gone, look from inside.
    b_end = json.loads(subprocess.run(
        ["nsenter", f"--net=/proc/{sshd['pid']}/ns/net", "ip", "-j", "addr", "show", "dev",
         IF_B], capture_output=True, text=True, check=True).stdout)[0]
    assert (a_end["mtu"], b_end["mtu"]) == (1500, 1500)
    assert "UP" not in a_end["flags"] and "UP" in b_end["flags"]
    assert [a["local"] for a in a_end["addr_info"] if a["family"] == "inet"] == []
    assert [a["local"] for a in b_end["addr_info"] if a["family"] == "inet"] == [ADDR_B]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"interface_b": "nosuch0"}, "host b has no interface 'nosuch0'"),
        ({"addr_b": "10.214.9.300"}, "10.214.9.300"),
    ],
)
def test_bad_link_config_is_named(host_b, change, message):
    real.ensure(link_spec(host_b))  # A's side up, so B is reachable over SSH
    spec = link_spec(host_b, link="broken", **change)
    with pytest.raises((real.SetupError, ValueError), match=message):
        real.ensure(spec)


def test_missing_tool_on_b_is_named(host_b):
    real.ensure(link_spec(host_b))
    host = host_from_spec("b", host_b)
    with pytest.raises(verify.LinkError, match="iperf9 is not installed on host b"):
        verify._require(host, "iperf9", "pair 'rig', link 'veth'")
    verify._require(host, "iperf3", "pair 'rig', link 'veth'")  # present: no error


def test_a_cell_runs_with_its_worker_started_over_ssh(host_b, tmp_path):
    """The whole cell path with B reached only over SSH: the worker is launched through
    sshd on B's link address, llama-server on A uses it, the sampler reads B over SSH."""
    spec = link_spec(host_b)
    real.ensure(spec)
    synthetic = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_head_kv": 1, "n_ff": 128,
                 "n_vocab": 1024, "context_length": 4096, "seed": 3}
    gguf = tmp_path / "m.gguf"
    gguf_model.write_synthetic(synthetic, gguf)
    model = gguf_model.describe({"synthetic": synthetic}, gguf)
    tools = tmp_path / "toolchain.json"
    toolchain.record("rig", "pip", {"a": {}, "b": host_b}, tools)
    link_result = tmp_path / "link.parquet"
    pd.DataFrame([{"fingerprint": "ssh-veth"}]).to_parquet(link_result)
    settings = {"layers_on_b": 2, "threads": 1, "slots": 1, "ctx_per_slot": 1024,
                "n_ctx": 1024}
    # 64 tokens: on a busy machine the client's counter read at the first token can be
    # interrupted a few times before one splits tokens from bytes cleanly (up to 7 ms seen
    # beside two busy loops), and a 16-token decode was over by then.
    cell = {"measurement_version": 1, "prompt_tokens": 100, "concurrency": 1,
            "n_predict": 64, "request_timeout_s": 60, "crash_below_tps": 1.0}
    requests = measure.run(cell, spec, model, {"settings": settings}, str(tools),
                         str(link_result), str(tmp_path / "c.parquet"),
                         str(tmp_path / "c.requests.parquet"))
    row = requests.iloc[0]
    assert row["status"] == "ok", row[["status", "error_type", "error_text"]].to_dict()
    assert row["generated_tokens"] == 64 and row["prompt_tokens"] == 100
    assert row["rpc_bytes_per_token_b_to_a"] >= synthetic["n_vocab"] * 4 * 0.9
    # One worker: one request-response turn per decoded token, counted from the RPC
    # connection's packets on host A (no delay, no sweep, nothing asked of B).
    assert abs(row["rpc_turns_per_token"] - 1) <= 0.1, row[
        ["rpc_decode_turns", "rpc_decode_tokens", "rpc_turns_per_token"]].to_dict()
    worker = procs.find("rpc-rig-0")
    assert worker["remote"] and worker["host"] == "b"  # started through sshd on B
    assert worker["argv"][worker["argv"].index("-H"):][:2] == ["-H", ADDR_B]
    assert procs.is_alive(worker)
    # B's sensors were read over SSH (a failed read would say "unreadable: ...").
    assert not row["sensors_b"].startswith("unreadable"), row["sensors_b"]
    # B is this machine: over SSH, NVML says there what it says here ("no NVML (...)" on
    # a machine without it), after B's temperature sources.
    assert row["sensors_b"].rsplit("; ", 1)[-1] == nvml_says()[0], row["sensors_b"]
    # B's CPU counters too, and what became of the measurement's own cgroup there (the
    # reader over SSH makes it; this sshd's namespace mounts no cgroup-v2 hierarchy, and
    # then the reading says so and has no own pressure).
    own = row["interference_b"]
    assert "own PSI in cgroup" in own or "own PSI unknown: no cgroup-v2 hierarchy" in own
    assert pd.isna(row["own_cpu_pressure_b_pct"]) == ("own PSI unknown" in own), own
    # B has no build of its own (no bin_dir): A's worker was carried to a private
    # directory on B, and teardown takes it off again.
    carried = worker["argv"][0]
    assert carried.startswith("/root/.splitbench-worker.") and carried.endswith(
        "/ggml-rpc-server"), carried
    lifecycle.stop("rig")
    assert not procs.is_alive(worker)
    # (This B shares A's files, and teardown deletes its namespace: look from A.)
    assert Path(carried).parent.is_dir()
    teardown.teardown(spare=["sshd-test"])
    assert not Path(carried).parent.exists()


def test_the_workflow_runs_a_pair_over_ssh(host_b, tmp_path):
    """`snakemake all` on a config of its own with one pair in mode: ssh, as the README
    says to run two real machines."""
    real.ensure(link_spec(host_b))  # A's end up: B's management address, here
    rig = {
        "measurement_version": 1, "toolchain": {"source": "pip"},
        "pairs": {"rig": {"mode": "ssh", "hosts": {"a": {}, "b": host_b}, "links": {
            "veth": {"interface_a": IF_A, "interface_b": IF_B, "addr_a": ADDR_A,
                     "addr_b": ADDR_B, "prefix": 30}}}},
        "baseline_link": "veth",
        "models": {"tiny": {"synthetic": {
            "n_layer": 2, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128,
            "n_vocab": 1024, "context_length": 4096, "seed": 1}, "layers_on_b": 1}},
        # Brief cells (no time floor): the run's path over SSH is the question, and each
        # cell and anchor would otherwise send requests for 2-3 s.
        "contexts": {"short": 32}, "concurrency": [1, 2],
        "cell": {"n_predict": 24, "single_stream_seconds": 0, "concurrent_seconds": 0},
        "link_check": {"iperf_seconds": 1, "rr_sizes": [64, 16384], "rr_samples": 40,
                       **NO_SOCKPERF},
    }
    work = workflow_copy(tmp_path)
    (work / "rig.yaml").write_text(yaml.safe_dump(rig, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "SPLITBENCH_STATE"}  # its own
    run = subprocess.run([SNAKEMAKE, "--cores", "1", "all", "--configfile", "rig.yaml",
                          "--replace-workflow-config"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    # The doctor ran first, over SSH: the pair was ready before anything started.
    doctor_said = (work / "results/doctor.txt").read_text()
    assert doctor_said in run.stdout
    for said in ("✓ rig: host B reached over SSH", "✓ rig: root on host B",
                 f"✓ rig: link veth, host B: {IF_B} up", "✓ rig: ports "):
        assert said in doctor_said, doctor_said
    assert doctor_said.endswith("splitbench doctor: ready\n"), doctor_said
    summary = pd.read_parquet(work / "results/summary/cells.parquet")
    assert sorted(summary["conc"]) == [1, 2] and set(summary["pair"]) == {"rig"}
    assert (summary["status"] == "ok").all()
    link = pd.read_parquet(work / "results/links/rig/veth.parquet").iloc[0]
    assert link["route_dev_a"] == IF_A and link["emulation_mode"] == "real"
    assert (work / "results/report.html").stat().st_size > 0
    # The run stopped the worker it started on B over SSH.
    assert not [c for c in commands_in(NS) if "ggml-rpc-server" in c]


# --- the paramiko transport: one connection, ~/.ssh/config, host keys ----------------
def accepted(tmp_path: Path) -> int:
    """Logins sshd has accepted since the test started it (its log is the fixture's)."""
    return (tmp_path / "sshd.log").read_text().count("Accepted publickey")


def gone_from_b(marker: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(marker in c for c in commands_in(NS)):
            return True
        time.sleep(0.1)
    return False


def test_one_connection_serves_every_command_process_check_and_sampler(host_b, tmp_path):
    real.ensure(link_spec(host_b))
    host = host_from_spec("b", host_b)
    ssh.close_all()
    before, logins = ssh.opened, accepted(tmp_path)
    assert host.run(["true"]).returncode == 0
    fds, threads = len(os.listdir("/proc/self/fd")), threading.active_count()
    for i in range(15):
        assert host.run(["echo", str(i)]).stdout == f"{i}\n"
    # Each command's channel is closed with it: no descriptor or thread is left behind.
    assert (len(os.listdir("/proc/self/fd")), threading.active_count()) == (fds, threads)
    done = host.run(["sh", "-c", "echo out; echo err >&2; exit 3"], check=False)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    with pytest.raises(HostError, match=r"host b: sleep timed out after 0.5s"):
        host.run(["sleep", "5"], timeout=0.5)
    record = host.spawn(["sleep", "301"], role="other", key="remote-sleep",
                        log_path=Path("/unused"))
    assert procs.is_alive(record)
    sampler = telemetry.Sampler({"a": Host("a"), "b": host}, every_s=0.2)
    with wakeup.low_latency({"b": host}) as held:
        time.sleep(1.5)
        assert any("cpu_dma_latency" in c for c in commands_in(NS))  # the holder runs on B
    assert gone_from_b("cpu_dma_latency")  # and ended with the block
    assert held["wakeup_latency_b"] == wakeup.HELD  # root on B: the request is held
    figures = sampler.finish()
    assert figures["sensor_readings_b"] >= 5, figures  # before, after, and streamed ones
    procs.stop("remote-sleep")
    assert not procs.is_alive(record)
    assert gone_from_b("sleep 301")
    # All of that went over one connection: one login, one client in this process.
    assert ssh.opened - before == 1
    assert accepted(tmp_path) - logins == 1
    assert ssh.client(host.ssh_settings()) is ssh.client(host_b)


def test_a_streaming_remote_process_reads_lines_and_ends_when_terminated(host_b):
    real.ensure(link_spec(host_b))
    host = host_from_spec("b", host_b)
    process = host.popen(["sh", "-c", "i=0; while :; do i=$((i+1)); echo line $i; "
                          "sleep 0.1; done # sb-stream"], stdout=subprocess.PIPE)
    assert [process.stdout.readline() for _ in range(3)] == ["line 1\n", "line 2\n",
                                                            "line 3\n"]
    assert process.poll() is None
    process.terminate()
    assert process.wait(timeout=10) == -15
    process.stdout.close()
    assert gone_from_b("sb-stream")  # its next write found the channel closed
    ended = host.popen(["sh", "-c", "read x; echo got $x; exit 4"], stdin=True,
                       stdout=subprocess.PIPE)
    ended.stdin.write("hello\n")
    ended.stdin.close()
    assert ended.stdout.readline() == "got hello\n"
    assert ended.wait(timeout=10) == 4
    ended.stdout.close()


def test_a_process_started_in_one_process_is_stopped_from_another(host_b, state_dir):
    """The reaper tears down in a process of its own: the record holds the connection
    settings (JSON), not a connection."""
    real.ensure(link_spec(host_b))
    host = host_from_spec("b", host_b)
    record = host.spawn(["sleep", "302"], role="other", key="remote-sleep",
                        log_path=Path("/unused"))
    stored = procs.find("remote-sleep")
    assert stored["remote"] == host.ssh_settings() == json.loads(json.dumps(stored["remote"]))
    stop = subprocess.run([sys.executable, "-c", "from splitbench.infra import teardown; "
                           "print(teardown.teardown())"], capture_output=True, text=True,
                          env={**os.environ, "SPLITBENCH_STATE": str(state_dir)}, timeout=60)
    assert "stopped other pid" in stop.stdout, stop.stderr[-2000:]
    # Read on this machine, whose namespace host B is: the teardown also ended B's sshd
    # (B's namespace is recorded), so asking B would only wait for SSH to give up (and
    # then say "not alive" whatever the process did). Ended, or a zombie its parent
    # has not collected yet, is not alive.
    assert gone_from_b("sleep 302")
    assert not procs.is_alive({**record, "remote": None})


def write_config(home: Path, text: str) -> None:
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "config").write_text(text)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A HOME of the test's own: its ~/.ssh/config, no agent, no default keys."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return path


def test_ssh_config_hostname_user_port_and_identity_are_honoured(host_b, home):
    real.ensure(link_spec(host_b))
    write_config(home, f"Host bee\n  HostName {ADDR_B}\n  User root\n  Port {PORT}\n"
                       f"  IdentityFile {host_b['identity']}\n"
                       f"  UserKnownHostsFile {host_b['known_hosts']}\n"
                       "Host nokey\n"
                       f"  HostName {ADDR_B}\n  User root\n  Port {PORT}\n")
    bee = Host("b", ssh="bee")
    assert bee.run(["id", "-un"]).stdout.strip() == "root"
    where = bee.run(["sh", "-c", "echo $SSH_CONNECTION"]).stdout.split()
    assert where[2:] == [ADDR_B, str(PORT)]
    # Without the IdentityFile (and no agent, no ~/.ssh/id_*) B refuses us.
    nokey = Host("b", ssh="nokey", known_hosts=host_b["known_hosts"])
    with pytest.raises(HostError, match=r"host b: ssh to nokey failed: no key to log in"):
        nokey.run(["true"])
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / "other"))
    other = Host("b", ssh="nokey", identity=str(home / "other"),
                 known_hosts=host_b["known_hosts"])
    with pytest.raises(HostError, match=r"host b: ssh to nokey failed: .*refused our keys"):
        other.run(["true"])
    # The pair's host block wins over the config: a wrong Port there is overridden.
    write_config(home, f"Host bee\n  HostName {ADDR_B}\n  User nobody\n  Port 1\n")
    block = Host("b", ssh="root@bee", ssh_port=PORT, identity=host_b["identity"],
                 known_hosts=host_b["known_hosts"])
    assert block.run(["id", "-un"]).stdout.strip() == "root"


def test_proxyjump_goes_through_a_verified_jump_host(host_b, home, tmp_path):
    """B's loopback sshd is reachable only through B: ProxyJump via B's link address."""
    real.ensure(link_spec(host_b))
    host_key = (tmp_path / "keys" / "host.pub").read_text()
    both = tmp_path / "both_known"
    both.write_text(f"[{ADDR_B}]:{PORT} {host_key}[127.0.0.1]:{PORT} {host_key}")
    write_config(home, f"Host jump\n  HostName {ADDR_B}\n  Port {PORT}\n  User root\n"
                       f"Host inner\n  HostName 127.0.0.1\n  Port {PORT}\n  User root\n"
                       f"  IdentityFile {host_b['identity']}\n  ProxyJump jump\n")
    inner = Host("b", ssh="inner", known_hosts=str(both))
    before = ssh.opened
    where = inner.run(["sh", "-c", "echo $SSH_CONNECTION"]).stdout.split()
    assert where[0] == "127.0.0.1" and where[2:] == ["127.0.0.1", str(PORT)]
    assert ssh.opened - before == 2  # the jump host's connection and B's through it
    inner.run(["true"])
    assert ssh.opened - before == 2
    # The jump host's key is verified too: only the inner one known, the jump refused.
    ssh.close_all()
    only_inner = tmp_path / "only_inner"
    only_inner.write_text(f"[127.0.0.1]:{PORT} {host_key}")
    with pytest.raises(HostError, match=rf"host b: ssh to inner failed: jump host "
                                        rf"root@{ADDR_B}:{PORT}: host key unknown"):
        Host("b", ssh="inner", known_hosts=str(only_inner)).run(["true"])


def test_unknown_and_changed_host_keys_are_refused_and_never_added(host_b, tmp_path):
    real.ensure(link_spec(host_b))
    keys = tmp_path / "keys"
    unknown = keys / "unknown_hosts"
    unknown.write_text("")
    stranger = host_from_spec("b", {**host_b, "known_hosts": str(unknown)})
    with pytest.raises(HostError, match=rf"host b: ssh to root@{ADDR_B} failed: host key "
                                        r"unknown: .*ssh-ed25519 SHA256:.*not in known_hosts"):
        stranger.run(["true"])
    assert unknown.read_text() == ""  # refused, not added
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "impostor"))
    changed = keys / "changed_hosts"
    changed.write_text(f"[{ADDR_B}]:{PORT} {(keys / 'impostor.pub').read_text()}")
    held = changed.read_text()
    moved = host_from_spec("b", {**host_b, "known_hosts": str(changed)})
    with pytest.raises(HostError, match=rf"host b: ssh to root@{ADDR_B} failed: host key "
                                        r"changed: .*refused"):
        moved.run(["true"])
    assert changed.read_text() == held
    assert host_from_spec("b", host_b).run(["true"]).returncode == 0  # the right key: in


@pytest.mark.skipif(not (Path(__file__).parents[2] / ".venv-vllm/bin/vllm").exists(),
                    reason="vLLM not installed (./bootstrap.sh vllm)")
def test_host_bs_vllm_is_described_over_ssh_and_a_missing_one_is_a_result(host_b, tmp_path):
    from splitbench.backends.vllm import toolchain as vllm_toolchain

    venv = str(Path(__file__).parents[2] / ".venv-vllm")
    real.ensure(link_spec(host_b))  # A reaches B's sshd over the link
    found = vllm_toolchain.record("rig", {"a": {}, "b": {**host_b, "vllm_venv": venv}},
                                  venv, tmp_path / "vllm.json")
    assert found["status"] == "ok", found
    assert found["b"]["vllm"]["executable"] == f"{venv}/bin/vllm"
    assert found["a"]["vllm"]["version"] == found["b"]["vllm"]["version"]
    missing = vllm_toolchain.record("rig", {"a": {}, "b": {**host_b,
                                                           "vllm_venv": "/opt/no-vllm"}},
                                    venv, tmp_path / "missing.json")
    assert missing["status"] == "failed"
    assert "host b has no working vLLM at /opt/no-vllm/bin/vllm" in missing["error"]
    assert "./bootstrap.sh vllm" in missing["error"]
