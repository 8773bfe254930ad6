"""The embedded lab's links: real namespaces, veth, tc and the delay relay."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pandas as pd
import pytest

from splitbench.infra import procs, teardown
from splitbench.links import lab
from splitbench.links.link import Link
from tests.conftest import needs_root
from tests.support import namespaces
from tests.support.lab import LINK_CHECK, detour

SPEC = {"pair": "tl", "link": "x", "index": 7, "mode": "embedded"}


def probe_min_us(link: Link, size: int = 64) -> float:
    """The fastest of 60 round trips: what the link itself allows. Scheduling on a busy
    machine only adds to a round trip, so the minimum is the link's property, where a
    median would also measure the machine's load."""
    client = [sys.executable, "-m", "splitbench.remote.probe", "client", link.connect_addr,
              str(link.ports.probe), "--sizes", str(size), "--samples", "60"]
    return min(json.loads(link.host_a.run(client).stdout)[str(size)])


def relay_earliest_us(state_dir) -> list[float]:
    """The earliest any chunk left against its due time (us), per connection and
    direction, from the logs of the stopped relays (they write them on SIGTERM)."""
    return [float(earliest) for log in sorted((state_dir / "logs").glob("relay-*.log"))
            for earliest in re.findall(r"earliest ([+-][\d.]+) us from due", log.read_text())]


def serve_probe(link: Link, state_dir) -> None:
    link.host_b.spawn([sys.executable, "-m", "splitbench.remote.probe", "serve", link.addr_b,
                       str(link.ports.probe)], role="probe", key="probe-test",
                      log_path=state_dir / "probe.log")
    # Wait on B itself: the relay on A accepts before B listens.
    link.host_b.wait_listening(link.addr_b, link.ports.probe, timeout=10)


def test_loopback_lab_adds_delay_with_the_relay_never_early_and_once_per_direction(
        state_dir, monkeypatch):
    """1.5 ms each way through the relay: the fastest round trip is never under the
    3 ms configured, and under 4.5 ms (the delay is applied once per direction; twice
    would hold every round trip 6 ms or more); by the relay's own clock, no chunk
    left before it was due (a round trip's ends add 50-100 us, which would hide a chunk
    sent a little early)."""
    monkeypatch.setenv("SPLITBENCH_LAB", "loopback")
    link = lab.ensure_link({**SPEC, "delay_ms": 1.5})
    assert link.emulation["mode"] == "loopback"
    assert link.emulation["delay"] == "relay"
    assert link.emulation["rate"].startswith("none")
    assert (link.addr_a, link.addr_b, link.connect_addr) == ("127.0.7.1", "127.0.7.2",
                                                           "127.0.7.1")
    serve_probe(link, state_dir)
    assert 3000 <= probe_min_us(link) < 4500
    teardown.teardown()
    earliest = relay_earliest_us(state_dir)
    assert earliest and min(earliest) >= 0, earliest


@needs_root()
@pytest.mark.slow
def test_namespace_link_is_shaped_recorded_and_torn_down(state_dir):
    """A 0.2 Gbit/s link with 0.5 ms each way between two namespaces: shaped as recorded,
    routed over its own interfaces, its fastest round trip never under the 1 ms
    configured and at most 25% over (and, where the relay adds the delay, no chunk sent
    before due by its own clock), adopted when asked for again, gone after teardown."""
    link = lab.ensure_link({**SPEC, "rate_gbit": 0.2, "delay_ms": 0.5})
    assert link.host_a.netns == "sb-tl-a" and link.host_b.netns == "sb-tl-b"
    assert link.emulation["rate"] in ("tbf", "netem")
    assert "200mbit" in " ".join(" ".join(cmd) for cmd in link.emulation["applied"])
    # B is reachable from A over exactly this link's addresses.
    route = link.host_a.run(["ip", "route", "get", link.addr_b]).stdout
    assert f"dev {link.interface_a}" in route
    serve_probe(link, state_dir)
    assert 1000 <= probe_min_us(link) <= 1250  # never early, at most 25% late
    # Calling again adopts the same link instead of rebuilding it.
    again = lab.ensure_link({**SPEC, "rate_gbit": 0.2, "delay_ms": 0.5})
    assert again.to_json() == link.to_json()
    teardown.teardown()
    assert not namespaces("sb-tl-")
    if link.emulation["delay"] == "relay":  # netem is never early by its own contract
        earliest = relay_earliest_us(state_dir)
        assert earliest and min(earliest) >= 0, earliest


def test_waiting_for_a_listener_names_host_and_address(state_dir):
    host = lab.Host("local")
    with pytest.raises(lab.HostError, match=r"host local: .*127\.0\.0\.1:9"):
        host.wait_listening("127.0.0.1", 9, timeout=0.5)


def test_a_server_that_ends_before_it_listens_ends_the_wait_and_is_named(state_dir, tmp_path):
    """As a server does that cannot bind (an address the host does not have): the wait
    ends at once, not at its deadline, naming the server, how it ended and its log."""
    host = lab.Host("local")
    server = host.spawn([sys.executable, "-c", "import sys; sys.exit(3)"], role="iperf3",
                        key="ends-at-once", log_path=tmp_path / "ends.log")
    started = time.monotonic()
    with pytest.raises(lab.HostError) as error:
        host.wait_listening("127.0.0.1", 9, timeout=60, server=server)
    assert time.monotonic() - started < 30  # far from the 60 s deadline
    assert str(error.value) == (f"host local: iperf3 exited with code 3 before it listened "
                                f"on 127.0.0.1:9; its log: {tmp_path / 'ends.log'}")


@needs_root()
@pytest.mark.slow
def test_unreachable_peer_is_named_and_leaves_no_output(state_dir, tmp_path):
    from splitbench.links import verify

    spec = {**SPEC, "link": "gone", "index": 8}
    link = lab.ensure_link(spec)
    # B loses its address: A's route still points at the link, but nobody answers.
    subprocess.run(["ip", "-n", link.host_b.netns, "addr", "flush", "dev", link.interface_b],
                   check=True)
    out = tmp_path / "gone.parquet"
    settings = {**LINK_CHECK, "iperf_seconds": 1}
    with pytest.raises((verify.LinkError, lab.HostError)) as error:
        verify.verify(spec, settings, out)
    message = str(error.value)
    # iperf3's server could not bind B's link address and ended: said at once, not
    # after the 10 s wait for it to listen.
    assert "host b: iperf3 exited with code 1 before it listened on" in message, message
    assert not out.exists()
    assert not any(p["role"] in ("iperf3", "probe", "sockperf") for p in procs.all_procs())




@needs_root()
@pytest.mark.slow
def test_traffic_that_bypasses_the_link_stops_its_verification(state_dir, tmp_path):
    """The guards fire: a route on A that sends B's address another way stops the link's
    verification, naming pair, link and host; and iperf3 traffic that did not cross the
    link's interface (its byte counter did not move) is refused even past the route."""
    from splitbench.links import verify

    spec = {**SPEC, "link": "detour", "index": 9}
    link = lab.ensure_link(spec)
    detour(link)
    out = tmp_path / "detour.parquet"
    settings = {**LINK_CHECK, "iperf_seconds": 1, "iperf_repeats": 1}
    with pytest.raises(verify.LinkError, match=r"pair 'tl', link 'detour': host a routes "
                                              rf"{link.addr_b} via 'sbtd-a', not via "):
        verify.verify(spec, settings, out)
    assert not out.exists()
    # Past the route check: iperf3 reaches B, but not over the link's interface.
    key = "tl__detour"
    verify.serve(link, "iperf3", key, ["iperf3", "-s", "-B", link.addr_b, "-p",
                                      str(link.ports.iperf)], link.ports.iperf)
    with pytest.raises(verify.LinkError, match=rf"iperf3 traffic did not cross "
                                              rf"{link.interface_a} on host a"):
        verify._throughput(link, settings, [], "pair 'tl', link 'detour'")


@needs_root()
@pytest.mark.slow
def test_a_link_that_fails_verification_is_a_result_its_launch_reports(state_dir, tmp_path,
                                                                       monkeypatch):
    """The link stage records a link that fails verification (here: A routes B's address
    around it) as a failed row instead of failing its job; the block's launch then
    reports that reason without starting a server."""
    from splitbench.backends.llamacpp import servers
    from splitbench.contracts import results

    monkeypatch.chdir(tmp_path)
    spec = {**SPEC, "link": "detour", "index": 9}
    detour(lab.ensure_link(spec))
    settings = {**LINK_CHECK, "iperf_seconds": 1, "iperf_repeats": 1}
    out = tmp_path / results.link("tl", "detour")
    done = subprocess.run(
        [sys.executable, "-m", "splitbench", "link", "--spec", json.dumps(spec),
         "--settings", json.dumps(settings), "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "link tl/detour FAILED verification: pair 'tl', link 'detour': host a routes" \
        in done.stdout
    row = pd.read_parquet(out).iloc[0]
    assert row["status"] == "failed" and row["a_to_b_gbps"] is None
    assert row["flags"].startswith("✗ verification failed: pair 'tl', link 'detour'")

    started_before = sorted((state_dir / "procs").glob("*.json"))
    record = servers.launch_record(spec, {"slots": 1}, {"path": "none.gguf", "sha256": "0"},
                                   {"a": {"build_id": "x"}})
    assert record["status"] == "failed"
    assert record["error"].startswith("link tl/detour failed verification: pair 'tl'")
    assert sorted((state_dir / "procs").glob("*.json")) == started_before  # none started


@needs_root()
def test_an_interface_that_holds_the_default_route_is_a_link_only_as_it_is():
    """A host (a namespace of its own) with a LAN interface that holds its default route
    (IPv4, then IPv6) and a cable interface that does not: the LAN one is refused,
    naming host and interface, before any address is set, unless adopted behind the
    run's guard; the cable one passes."""
    from splitbench.infra.hosts import Host
    from splitbench.links import real

    ns = "sb-droute-test"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for argv in (["link", "add", "lan0", "type", "veth", "peer", "name", "lan1"],
                     ["link", "add", "cable0", "type", "veth", "peer", "name", "cable1"],
                     *(["link", "set", name, "up"] for name in ("lan0", "lan1", "cable0",
                                                                "cable1")),
                     ["addr", "add", "10.251.0.2/24", "dev", "lan0"],
                     ["addr", "add", "10.252.0.1/30", "dev", "cable0"]):
            subprocess.run(["ip", "-n", ns, *argv], check=True)
        host = Host("b", netns=ns)
        where = "pair 'p', link 'l'"
        assert real.lan_interface(host, "lan0", where) is False  # no default yet
        subprocess.run(["ip", "-n", ns, "route", "add", "default", "via", "10.251.0.1"],
                       check=True)
        with pytest.raises(real.SetupError, match=r"pair 'p', link 'l': host b's interface "
                                                  r"lan0 holds the default route \(IPv4\)"):
            real.lan_interface(host, "lan0", where)
        # As it is, behind the run's guard: the LAN compared as a link.
        assert real.lan_interface(host, "lan0", where, adopt=True) is True
        with pytest.raises(real.SetupError, match="needs the pair's firewall: guard"):
            real.lan_interface(host, "lan0", where, adopt=True, firewall="own")
        assert real.lan_interface(host, "cable0", where) is False
        subprocess.run(["ip", "-n", ns, "route", "del", "default"], check=True)
        subprocess.run(["ip", "-n", ns, "-6", "route", "add", "default", "dev", "lan0"],
                       check=True)
        with pytest.raises(real.SetupError, match=r"holds the default route \(IPv6\)"):
            real.lan_interface(host, "lan0", where)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
