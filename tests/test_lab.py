"""The embedded lab's links: real namespaces, veth, tc and the delay relay."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from splitbench import lab, procs
from tests.conftest import needs_root

SPEC = {"pair": "tl", "link": "x", "index": 7, "mode": "embedded"}


def probe_p50_us(link: lab.Link, size: int = 64) -> float:
    client = [sys.executable, "-m", "splitbench.probe", "client", link.connect_addr,
              str(lab.PROBE_PORT), "--sizes", str(size), "--samples", "60"]
    samples = json.loads(link.host_a.run(client).stdout)[str(size)]
    return sorted(samples)[len(samples) // 2]


def serve_probe(link: lab.Link, state_dir) -> None:
    link.host_b.spawn([sys.executable, "-m", "splitbench.probe", "serve", link.addr_b,
                       str(lab.PROBE_PORT)], role="probe", key="probe-test",
                      log_path=state_dir / "probe.log")
    # Wait on B itself: the relay on A accepts before B listens.
    link.host_b.wait_listening(link.addr_b, lab.PROBE_PORT, timeout=10)


def test_loopback_lab_adds_delay_with_the_relay(state_dir, monkeypatch):
    monkeypatch.setenv("SPLITBENCH_LAB", "loopback")
    link = lab.ensure_link({**SPEC, "delay_ms": 1.5})
    assert link.emulation["mode"] == "loopback"
    assert link.emulation["delay"] == "relay"
    assert link.emulation["rate"].startswith("none")
    assert (link.addr_a, link.addr_b, link.connect_addr) == ("127.0.7.1", "127.0.7.2",
                                                           "127.0.7.1")
    serve_probe(link, state_dir)
    assert 3000 <= probe_p50_us(link) <= 5500  # 1.5 ms each way


@needs_root()
def test_namespace_link_is_shaped_recorded_and_torn_down(state_dir):
    link = lab.ensure_link({**SPEC, "rate_gbit": 0.2, "delay_ms": 0.5})
    assert link.host_a.netns == "sb-tl-a" and link.host_b.netns == "sb-tl-b"
    assert link.emulation["rate"] in ("tbf", "netem")
    assert "200mbit" in " ".join(" ".join(cmd) for cmd in link.emulation["applied"])
    # B is reachable from A over exactly this link's addresses.
    route = link.host_a.run(["ip", "route", "get", link.addr_b]).stdout
    assert f"dev {link.interface_a}" in route
    serve_probe(link, state_dir)
    assert 1000 <= probe_p50_us(link) <= 3000  # 0.5 ms each way
    # Calling again adopts the same link instead of rebuilding it.
    again = lab.ensure_link({**SPEC, "rate_gbit": 0.2, "delay_ms": 0.5})
    assert again.to_json() == link.to_json()
    procs.teardown()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "sb-tl-" not in names


def test_waiting_for_a_listener_names_host_and_address(state_dir):
    host = lab.Host("local")
    with pytest.raises(lab.HostError, match=r"host local: .*127\.0\.0\.1:9"):
        host.wait_listening("127.0.0.1", 9, timeout=0.5)


@needs_root()
def test_unreachable_peer_is_named_and_leaves_no_output(state_dir, tmp_path):
    from splitbench import links, plan

    spec = {**SPEC, "link": "gone", "index": 8}
    link = lab.ensure_link(spec)
    # B loses its address: A's route still points at the link, but nobody answers.
    subprocess.run(["ip", "-n", link.host_b.netns, "addr", "flush", "dev", link.interface_b],
                   check=True)
    out = tmp_path / "gone.parquet"
    settings = {**plan.link_check_settings({}), "iperf_seconds": 1}
    with pytest.raises((links.LinkError, lab.HostError)) as error:
        links.verify(spec, settings, out)
    message = str(error.value)
    assert "host b" in message or ("pair 'tl'" in message and "link 'gone'" in message)
    assert not out.exists()
    assert not any(p["role"] in ("iperf3", "probe", "sockperf") for p in procs.all_procs())
