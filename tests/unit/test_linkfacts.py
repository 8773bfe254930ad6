"""linkfacts against fake sysfs trees laid out like the real one (relative symlinks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from splitbench.remote.linkfacts import asymmetry, flags, interface_facts

PCI = "devices/pci0000:00"


def _write(directory: Path, **files: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text + "\n")


def _link(link: Path, target: Path) -> None:
    """A relative symlink, as sysfs has: class/net/IF -> ../../devices/.../net/IF."""
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def _netdev(sys: Path, ifname: str, parent: str | None, driver: str | None,
            **files: str) -> Path:
    """Create devices/<parent>/net/IF (or devices/virtual/net/IF) with its class link."""
    base = sys / (parent if parent else "devices/virtual")
    netdir = base / "net" / ifname
    _write(netdir, **files)
    _link(sys / "class" / "net" / ifname, netdir)
    if parent:
        _link(netdir / "device", base)
        if driver:
            drv = sys / "bus" / "pci" / "drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            _link(base / "driver", drv)
    return netdir


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    root.mkdir()
    return root


def _thunderbolt_tree(sys: Path) -> None:
    """thunderbolt0 on service 1-1.0 of XDomain peer 1-1: 20.0 Gb/s x 2 lanes (USB4 40G)."""
    domain = f"{PCI}/0000:00:0d.2/domain1"
    _write(sys / domain / "1-0", unique_id="host")  # host router: no speed files
    _write(sys / domain / "1-0" / "1-1", tx_speed="20.0 Gb/s", rx_speed="20.0 Gb/s",
           tx_lanes="2", rx_lanes="2", generation="4")
    # A decoy elsewhere, sorted first, so picking "the first device" would be wrong.
    _write(sys / domain / "1-0" / "0-9", tx_speed="40.0 Gb/s", rx_speed="40.0 Gb/s",
           tx_lanes="2", rx_lanes="2")
    _netdev(sys, "thunderbolt0", f"{domain}/1-0/1-1/1-1.0", "thunderbolt-net",
            speed="-1", mtu="65520", operstate="up")
    # Real driver link points into bus/thunderbolt, not bus/pci.
    service = sys / domain / "1-0" / "1-1" / "1-1.0"
    (service / "driver").unlink()
    drv = sys / "bus" / "thunderbolt" / "drivers" / "thunderbolt-net"
    drv.mkdir(parents=True)
    _link(service / "driver", drv)
    bus = sys / "bus" / "thunderbolt" / "devices"
    for name, path in [("0-9", "1-0/0-9"), ("1-0", "1-0"), ("1-1", "1-0/1-1"),
                       ("1-1.0", "1-0/1-1/1-1.0")]:
        _link(bus / name, sys / domain / path)


def test_thunderbolt_usb4_fallback_and_far_below(sysfs: Path) -> None:
    _thunderbolt_tree(sysfs)
    facts = interface_facts("thunderbolt0", sysfs)
    assert facts["driver"] == "thunderbolt-net"
    assert facts["speed_mbps"] is None
    assert facts["mtu"] == 65520
    assert facts["thunderbolt"] == {
        "device": "1-1", "tx_gbps_per_lane": 20.0, "rx_gbps_per_lane": 20.0,
        "tx_lanes": 2, "rx_lanes": 2, "tx_gbps": 40.0, "rx_gbps": 40.0, "generation": 4,
    }
    assert facts["negotiated_gbps"] == 40.0

    found = flags(facts, 3.13, expected_gbps=80)
    assert len(found) == 2
    assert found[0].startswith("negotiation fallback:") and "thunderbolt0" in found[0]
    assert "40" in found[0] and "80" in found[0]
    assert found[1].startswith("measured far below negotiated:") and "3.13" in found[1]

    # Without an expectation the seed case (20 Gb/s x 2 lanes) is still called out.
    assert any(m.startswith("negotiation fallback:") for m in flags(facts, None))


def test_thunderbolt_falls_back_to_first_device_when_unresolvable(sysfs: Path) -> None:
    _thunderbolt_tree(sysfs)
    (sysfs / "class" / "net" / "thunderbolt0" / "device").unlink()
    facts = interface_facts("thunderbolt0", sysfs)
    assert facts["thunderbolt"]["device"] == "0-9"
    assert facts["negotiated_gbps"] == 80.0
    assert flags(facts, None) == []


def test_5gbe_nic_has_no_flags(sysfs: Path) -> None:
    _netdev(sysfs, "enp5s0", f"{PCI}/0000:00:1c.0/0000:05:00.0", "atlantic",
            speed="5000", duplex="full", mtu="1500", operstate="up")
    facts = interface_facts("enp5s0", sysfs)
    assert facts["driver"] == "atlantic"
    assert facts["speed_mbps"] == 5000 and facts["duplex"] == "full"
    assert facts["usb_speed_mbps"] is None and facts["thunderbolt"] is None
    assert facts["negotiated_gbps"] == 5.0
    assert flags(facts, 4.71) == []
    assert flags(facts, 4.71, expected_gbps=10)[0].startswith("negotiation fallback:")


def test_usb_port_caps_10gbe_nic(sysfs: Path) -> None:
    usbdev = f"{PCI}/0000:00:14.0/usb2/2-1"
    _write(sysfs / usbdev, speed="5000", idVendor="0bda", idProduct="8157")
    _write(sysfs / f"{PCI}/0000:00:14.0/usb2", speed="10000", idVendor="1d6b")  # root hub
    _netdev(sysfs, "enx00e04c680001", f"{usbdev}/2-1:1.0", "r8152",
            speed="10000", duplex="full", mtu="1500", operstate="up")
    facts = interface_facts("enx00e04c680001", sysfs)
    assert facts["driver"] == "r8152"
    assert facts["speed_mbps"] == 10000
    assert facts["usb_speed_mbps"] == 5000
    assert facts["negotiated_gbps"] == 5.0
    found = flags(facts, 4.5)
    assert len(found) == 1
    assert found[0].startswith("USB port caps the NIC:")
    assert "10000" in found[0] and "5000" in found[0] and "enx00e04c680001" in found[0]


def test_veth_without_device_or_speed(sysfs: Path) -> None:
    _netdev(sysfs, "veth0", None, None, speed="-1", mtu="1500", operstate="up")
    facts = interface_facts("veth0", sysfs)
    assert facts["speed_mbps"] is None
    assert facts["driver"] is None and facts["usb_speed_mbps"] is None
    assert facts["negotiated_gbps"] is None
    assert facts["mtu"] == 1500 and facts["operstate"] == "up"
    assert facts["duplex"] is None
    assert flags(facts, 9.0) == []


def test_unreadable_speed_is_none(sysfs: Path) -> None:
    """EINVAL on read is an OSError; a directory named speed raises one too."""
    netdir = _netdev(sysfs, "veth1", None, None, mtu="1500")
    (netdir / "speed").mkdir()
    assert interface_facts("veth1", sysfs)["speed_mbps"] is None


def test_asymmetry() -> None:
    message = asymmetry(3.13, 16.2)
    assert message is not None
    assert "3.13" in message and "16.2" in message and "81%" in message
    assert asymmetry(4.38, 4.76) is None
    assert asymmetry(4.38, None) is None
    assert asymmetry(4.38, 4.76, threshold=0.05) is not None


def test_missing_interface_gives_all_none(sysfs: Path) -> None:
    facts = interface_facts("eth9", sysfs)
    assert facts["ifname"] == "eth9"
    assert all(value is None for key, value in facts.items() if key != "ifname")
    assert len(facts) == 9
    assert flags(facts, 1.0, expected_gbps=10) == []
    missing_root = interface_facts("eth0", sysfs / "nope")
    assert missing_root["speed_mbps"] is None and missing_root["driver"] is None


def test_veth_reporting_a_made_up_speed_claims_no_negotiated_rate(sysfs: Path) -> None:
    """veth reads speed 10000 on some kernels; without a device behind it that is no fact."""
    _netdev(sysfs, "sbl3", None, None, speed="10000", mtu="1500", operstate="up")
    facts = interface_facts("sbl3", sysfs)
    assert facts["speed_mbps"] == 10000
    assert facts["negotiated_gbps"] is None
    assert flags(facts, 1.05) == []


def test_an_asymmetry_inside_the_repeats_spread_is_not_told_apart() -> None:
    # An unshaped link on a busy 2-core machine: 25.1 (20.0-30.3) against 14.3 (6.5-22.2).
    assert asymmetry(25.13, 14.34, 0.25, (20.0, 30.26), (6.46, 22.22)) is None
    # The slower direction's best repeat below the faster one's worst: a one-sided link.
    message = asymmetry(25.13, 14.34, 0.25, (24.0, 26.0), (13.9, 14.8))
    assert message is not None and message.startswith("direction asymmetry: A->B 25.1")
    assert asymmetry(14.34, 25.13, 0.25, (13.9, 14.8), (24.0, 26.0)) is not None
