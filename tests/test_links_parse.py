import json

import numpy as np
import pytest

from splitbench import links, probe
from tests.conftest import ROOT

FIXTURES = ROOT / "tests/fixtures/iperf3"


def load(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_forward_is_a_to_b():
    report = load("forward")
    parsed = links.parse_iperf(report)
    assert parsed["b_to_a"] is None
    assert parsed["a_to_b"] == pytest.approx(
        report["end"]["sum_received"]["bits_per_second"] / 1e9)


def test_reverse_is_b_to_a():
    parsed = links.parse_iperf(load("reverse"))
    assert parsed["a_to_b"] is None and parsed["b_to_a"] > 0


def test_bidir_gives_both_directions():
    report = load("bidir")
    parsed = links.parse_iperf(report)
    assert parsed["a_to_b"] == pytest.approx(
        report["end"]["sum_received"]["bits_per_second"] / 1e9)
    assert parsed["b_to_a"] == pytest.approx(
        report["end"]["sum_received_bidir_reverse"]["bits_per_second"] / 1e9)


def test_iperf_error_is_raised():
    with pytest.raises(links.LinkError, match="unable to connect"):
        links.parse_iperf({"error": "unable to connect to server"})


def test_ping_parse():
    text = "\n".join(f"64 bytes from 10.0.0.2: icmp_seq={i} ttl=64 time={t} ms"
                     for i, t in enumerate([0.1, 0.2, 0.3, 5.0]))
    parsed = links.parse_ping(text)
    assert parsed["ping_ms"] == pytest.approx(0.25)
    assert parsed["ping_min_ms"] == pytest.approx(0.1)
    with pytest.raises(links.LinkError):
        links.parse_ping("100% packet loss")


def test_theil_sen_recovers_intercept_despite_outliers():
    rng = np.random.default_rng(1)
    x = np.repeat([0.06, 1, 4, 16, 64, 256], 5).astype(float)
    y = 326 + 2.5 * x + rng.normal(0, 3, x.size)
    y[[3, 11, 20]] += 5000  # scheduler hiccups
    intercept, slope, _ = probe.theil_sen(x, y)
    assert intercept == pytest.approx(326, abs=10)
    assert slope == pytest.approx(2.5, abs=0.2)
    least_squares = np.polyfit(x, y, 1)
    assert abs(least_squares[1] - 326) > 100  # why the robust fit is needed


def test_fixed_overhead_from_probe_samples():
    rtts = {str(s): [100 + s / 1024 * 3.0] * 5 for s in (64, 1024, 16384, 65536)}
    fit = probe.fixed_overhead(rtts)
    assert fit["rr_fixed_us"] == pytest.approx(100, abs=0.5)
    assert fit["rr_us_per_kb"] == pytest.approx(3.0, abs=0.01)
