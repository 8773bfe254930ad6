import json
import re

import numpy as np
import pytest

from splitbench.contracts import results
from splitbench.infra import fits
from splitbench.links import history, tool_output, verify
from tests.conftest import ROOT

FIXTURES = ROOT / "tests/unit/fixtures/iperf3"


def load(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_forward_is_a_to_b():
    report = load("forward")
    parsed = tool_output.parse_iperf(report)
    assert parsed["b_to_a"] is None
    assert parsed["a_to_b"] == pytest.approx(
        report["end"]["sum_received"]["bits_per_second"] / 1e9)


def test_reverse_is_b_to_a():
    parsed = tool_output.parse_iperf(load("reverse"))
    assert parsed["a_to_b"] is None and parsed["b_to_a"] > 0


def test_bidir_gives_both_directions():
    report = load("bidir")
    parsed = tool_output.parse_iperf(report)
    assert parsed["a_to_b"] == pytest.approx(
        report["end"]["sum_received"]["bits_per_second"] / 1e9)
    assert parsed["b_to_a"] == pytest.approx(
        report["end"]["sum_received_bidir_reverse"]["bits_per_second"] / 1e9)


def test_iperf_error_is_raised():
    with pytest.raises(tool_output.LinkError, match="unable to connect"):
        tool_output.parse_iperf({"error": "unable to connect to server"})


def test_ping_parse():
    text = "\n".join(f"64 bytes from 10.0.0.2: icmp_seq={i} ttl=64 time={t} ms"
                     for i, t in enumerate([0.1, 0.2, 0.3, 5.0]))
    parsed = tool_output.parse_ping(text)
    assert parsed["ping_ms"] == pytest.approx(0.25)
    assert parsed["ping_min_ms"] == pytest.approx(0.1)
    with pytest.raises(tool_output.LinkError):
        tool_output.parse_ping("100% packet loss")


def test_theil_sen_recovers_intercept_despite_outliers():
    rng = np.random.default_rng(1)
    x = np.repeat([0.06, 1, 4, 16, 64, 256], 5).astype(float)
    y = 326 + 2.5 * x + rng.normal(0, 3, x.size)
    y[[3, 11, 20]] += 5000  # scheduler hiccups
    intercept, slope, _ = fits.theil_sen(x, y)
    assert intercept == pytest.approx(326, abs=10)
    assert slope == pytest.approx(2.5, abs=0.2)
    least_squares = np.polyfit(x, y, 1)
    assert abs(least_squares[1] - 326) > 100  # why the robust fit is needed


def test_fixed_overhead_from_probe_samples():
    rtts = {str(s): [100 + s / 1024 * 3.0] * 5 for s in (64, 1024, 16384, 65536)}
    fit = verify.fixed_overhead(rtts)
    assert fit["rr_fixed_us"] == pytest.approx(100, abs=0.5)
    assert fit["rr_us_per_kb"] == pytest.approx(3.0, abs=0.01)


def test_sockperf_parse_reads_full_rtt_percentiles_through_colour_codes():
    text = (FIXTURES.parent / "sockperf/pingpong_16k.txt").read_text()
    parsed = tool_output.parse_sockperf(text)
    p50 = float(re.search(r"percentile 50\.000 =\s+([\d.]+)", strip_ansi(text)).group(1))
    assert parsed["sockperf_p50_us"] == p50
    assert parsed["sockperf_p50_us"] <= parsed["sockperf_p90_us"] <= parsed["sockperf_p99_us"]
    with pytest.raises(tool_output.LinkError):
        tool_output.parse_sockperf("sockperf: ERROR: connect failed")


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_history_reports_material_changes_only():
    old = {"fingerprint": "f1", "measured_at": "t0", "a_to_b_gbps": 4.71,
           "b_to_a_gbps": 4.71, "bidir_gbps": 9.38, "rr16k_p50_us": 600.0}
    same = {**old, "a_to_b_gbps": 4.60, "measured_at": "t1"}
    assert history.compare(old, same, threshold=0.15) == []
    slower = {**old, "b_to_a_gbps": 3.13}
    changes = history.compare(old, slower, threshold=0.15)
    assert len(changes) == 1 and "b_to_a_gbps changed -34%" in changes[0]
    moved = {**old, "fingerprint": "f2"}
    assert "fingerprint f1 -> f2" in history.compare(old, moved, threshold=0.15)[0]


def test_history_is_kept_across_verifications(tmp_path):
    out = tmp_path / "links/p/l.parquet"
    row = {"fingerprint": "f", "measured_at": "t0", "a_to_b_gbps": 1.0, "b_to_a_gbps": 1.0,
           "bidir_gbps": 2.0, "rr16k_p50_us": 100.0}
    settings = {"change_threshold": 0.15}
    assert history.compare_and_keep(row, out, settings) == []
    later = {**row, "measured_at": "t1", "rr16k_p50_us": 200.0}
    assert "rr16k_p50_us changed +100%" in history.compare_and_keep(later, out, settings)[0]
    assert len(results.link_history(out).read_text().splitlines()) == 2


class _Answers:
    """A host whose iperf3 client prints the given JSON reports, one per run."""

    def __init__(self, *reports):
        self.reports = list(reports)
        self.runs = 0

    def run(self, argv, timeout, check):
        self.runs += 1
        return type("Done", (), {"stdout": json.dumps(self.reports.pop(0))})()


def test_a_server_still_finishing_its_last_test_is_waited_for(monkeypatch):
    """A reset control connection (a loaded machine) or "busy" moves no data: the test is
    run again, and the next report is the result."""
    monkeypatch.setattr(verify.time, "sleep", lambda s: None)
    reset = {"error": "unable to receive control message: Connection reset by peer"}
    busy = {"error": "the server is busy running a test. try again later"}
    refused = {"error": "unable to connect to server: Connection refused"}
    cookie = {"error": "unable to send cookie to server: Connection reset by peer"}
    host = _Answers(reset, busy, refused, cookie, load("forward"))
    parsed = verify._iperf_once(host, ["iperf3"], timeout=5)
    assert host.runs == 5
    assert parsed["a_to_b"] > 0


def test_any_other_iperf_error_is_not_retried(monkeypatch):
    monkeypatch.setattr(verify.time, "sleep", lambda s: None)
    host = _Answers({"error": "unable to connect to server: No route to host"})
    with pytest.raises(tool_output.LinkError, match="No route to host"):
        verify._iperf_once(host, ["iperf3"], timeout=5)
    assert host.runs == 1


def test_a_server_that_stays_away_fails_the_check(monkeypatch):
    monkeypatch.setattr(verify.time, "sleep", lambda s: None)
    refused = {"error": "unable to connect to server: Connection refused"}
    host = _Answers(*[refused] * 20)
    with pytest.raises(tool_output.LinkError, match="Connection refused"):
        verify._iperf_once(host, ["iperf3"], timeout=5)
    assert host.runs == 20


def test_a_link_short_of_its_emulated_rate_says_so():
    from splitbench.links.verify import emulation_shortfall

    emulation = {"rate_gbit_a_to_b": 0.5, "rate_gbit_b_to_a": 0.5}
    # The e2e run on a VM under steal: 0.41 of 0.5 Gbit/s A->B.
    flags = emulation_shortfall(emulation, {"a_to_b_gbps": 0.406, "b_to_a_gbps": 0.445})
    assert flags == ["A→B measured 0.41 Gbit/s, 19% below the emulated 0.50: the machine "
                     "did not carry the emulated rate during the check"]
    assert emulation_shortfall(emulation, {"a_to_b_gbps": 0.48, "b_to_a_gbps": 0.47}) == []
    # No emulated rate (loopback, a real link): nothing to fall short of.
    assert emulation_shortfall({"rate_gbit_a_to_b": None}, {"a_to_b_gbps": 0.1}) == []
