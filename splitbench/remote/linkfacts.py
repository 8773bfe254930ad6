"""What the kernel says about a network interface, read from sysfs.

A benchmark of a link is only as honest as its statement of what the link *is*. A
Thunderbolt 5 cable that fell back to USB4 40G, or a 10GbE USB NIC behind a 5 Gbit/s
port, measures "slow" for reasons that have nothing to do with llama.cpp. These facts
let a result say so. The sysfs root is a parameter so tests can build fake trees.

Every reader here returns None for anything missing or unreadable, never raises:
virtual links (veth, bridges) lack a `device` symlink and fail `speed` with EINVAL.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TypedDict

TB_FILES = ("tx_speed", "rx_speed", "tx_lanes", "rx_lanes")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _read(path: Path) -> str | None:
    """File text stripped, or None: sysfs reads fail with OSError on links that are down."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _number(text: str | None) -> float | None:
    """First number in text ("20.0 Gb/s" -> 20.0), so unit suffixes never break parsing."""
    match = _NUMBER.search(text) if text else None
    return float(match.group()) if match else None


def _int(path: Path) -> int | None:
    value = _number(_read(path))
    return int(value) if value is not None else None


def _resolve(path: Path) -> Path | None:
    """Resolved symlink target, or None when the link is absent or dangling."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _speed_mbps(netdir: Path) -> int | None:
    """Link speed; the kernel reports -1 (SPEED_UNKNOWN) or EINVAL when it does not know."""
    speed = _int(netdir / "speed")
    return speed if speed is not None and speed > 0 else None


def _driver(netdir: Path) -> str | None:
    target = _resolve(netdir / "device" / "driver")
    return target.name if target else None


def _usb_speed_mbps(netdir: Path, root: Path) -> int | float | None:
    """Speed of the nearest USB device above the NIC: the port, not the NIC, may be the cap.

    A USB NIC's `device` is a USB interface (e.g. 2-1:1.0); the USB device owning it is the
    nearest ancestor with both `speed` and `idVendor` (PCI devices have `vendor` instead).
    """
    device = _resolve(netdir / "device")
    if device is None:
        return None
    for candidate in (device, *device.parents):
        if candidate == root or root not in candidate.parents:
            return None
        if (candidate / "speed").is_file() and (candidate / "idVendor").is_file():
            value = _number(_read(candidate / "speed"))
            if value is None:
                return None
            return int(value) if value.is_integer() else value
    return None


def _tb_candidates(root: Path) -> list[Path]:
    """Thunderbolt devices that report link speed and lanes (host routers do not)."""
    bus = root / "bus" / "thunderbolt" / "devices"
    try:
        entries = sorted(bus.iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    return [p for p in entries if all((p / name).is_file() for name in TB_FILES)]


def _tb_peer(netdir: Path, root: Path) -> Path | None:
    """The Thunderbolt device carrying this interface: its nearest ancestor, else the first."""
    candidates = _tb_candidates(root)
    device = _resolve(netdir / "device")
    if device is not None:
        ancestors = [c for c in candidates
                     if (r := _resolve(c)) is not None and (r == device or r in device.parents)]
        if ancestors:
            return max(ancestors, key=lambda c: len(_resolve(c).parts))
    return candidates[0] if candidates else None


class ThunderboltFacts(TypedDict):
    """The Thunderbolt device carrying an interface (`_thunderbolt`): its lanes and rates."""

    device: str
    tx_gbps_per_lane: float | None
    rx_gbps_per_lane: float | None
    tx_lanes: int | None
    rx_lanes: int | None
    tx_gbps: float | None
    rx_gbps: float | None
    generation: int | None


def _thunderbolt(netdir: Path, root: Path, ifname: str,
                 driver: str | None) -> ThunderboltFacts | None:
    """Per-lane speed times lanes: tx_speed/rx_speed are per lane, so "20.0 Gb/s" x 2 = 40."""
    if driver != "thunderbolt-net" and not ifname.startswith("thunderbolt"):
        return None
    peer = _tb_peer(netdir, root)
    if peer is None:
        return None
    tx, rx = _number(_read(peer / "tx_speed")), _number(_read(peer / "rx_speed"))
    tx_lanes, rx_lanes = _int(peer / "tx_lanes"), _int(peer / "rx_lanes")
    return {
        "device": peer.name,
        "tx_gbps_per_lane": tx,
        "rx_gbps_per_lane": rx,
        "tx_lanes": tx_lanes,
        "rx_lanes": rx_lanes,
        "tx_gbps": tx * tx_lanes if tx is not None and tx_lanes is not None else None,
        "rx_gbps": rx * rx_lanes if rx is not None and rx_lanes is not None else None,
        "generation": _int(peer / "generation"),
    }


def _negotiated_gbps(speed: int | None, usb: int | float | None,
                     tb: ThunderboltFacts | None) -> float | None:
    """The best single statement of the negotiated rate; a USB port caps the NIC behind it."""
    if tb is not None:
        rates = [r for r in (tb["tx_gbps"], tb["rx_gbps"]) if r is not None]
        if rates:
            return float(min(rates))
    if speed is None:
        return None
    return min(speed, usb if usb is not None else speed) / 1000


class InterfaceFacts(TypedDict):
    """What sysfs says about an interface (`interface_facts`); None: missing or unreadable."""

    ifname: str
    speed_mbps: int | None
    duplex: str | None
    mtu: int | None
    operstate: str | None
    driver: str | None
    usb_speed_mbps: int | float | None
    thunderbolt: ThunderboltFacts | None
    negotiated_gbps: float | None


def interface_facts(ifname: str, sysfs: str | Path = "/sys") -> InterfaceFacts:
    """Read speed, duplex, MTU, state, driver, USB port speed and Thunderbolt lanes of ifname.

    Keys: ifname, speed_mbps, duplex, mtu, operstate, driver, usb_speed_mbps, thunderbolt,
    negotiated_gbps. A missing interface gives all-None facts so a caller never has to guard.
    """
    root = Path(sysfs).resolve()
    netdir = root / "class" / "net" / ifname
    facts: InterfaceFacts = {"ifname": ifname, "speed_mbps": None, "duplex": None, "mtu": None,
                             "operstate": None, "driver": None, "usb_speed_mbps": None,
                             "thunderbolt": None, "negotiated_gbps": None}
    if not os.path.isdir(netdir):
        return facts
    speed = _speed_mbps(netdir)
    driver = _driver(netdir)
    usb = _usb_speed_mbps(netdir, root)
    tb = _thunderbolt(netdir, root, ifname, driver)
    # A virtual link (veth, bridge: no device behind it) reports a made-up speed such as
    # 10000: keep it as read, but claim no negotiated rate for it.
    virtual = driver is None and tb is None
    facts.update(speed_mbps=speed, duplex=_read(netdir / "duplex"), mtu=_int(netdir / "mtu"),
                 operstate=_read(netdir / "operstate"), driver=driver, usb_speed_mbps=usb,
                 thunderbolt=tb,
                 negotiated_gbps=None if virtual else _negotiated_gbps(speed, usb, tb))
    return facts


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _tb_is_usb4_40g(tb: dict) -> bool:
    """The seed case: a TB5 cable on a USB4 40G port reads 20.0 Gb/s per lane x 2 lanes."""
    lane, lanes = tb.get("tx_gbps_per_lane"), tb.get("tx_lanes")
    return lane == 20.0 and lanes is not None and lane * lanes == 40.0


def _fallback_flag(facts: dict, expected_gbps: float | None) -> str | None:
    """A link that negotiated less than it should: TB5 hardware running at USB4 40G, say."""
    name, tb = facts.get("ifname"), facts.get("thunderbolt")
    negotiated = facts.get("negotiated_gbps")
    tb_text = ""
    if tb:
        tb_text = (f" (Thunderbolt {tb['device']}: {tb['tx_gbps_per_lane']} Gb/s per lane x "
                   f"{tb['tx_lanes']} lanes)")
    if negotiated is None:
        return None
    if expected_gbps is not None:
        if negotiated < expected_gbps:
            return (f"negotiation fallback: {name} negotiated {_fmt(negotiated)} Gbit/s, "
                    f"expected {_fmt(expected_gbps)} Gbit/s{tb_text}")
        return None
    if tb and _tb_is_usb4_40g(tb):
        return (f"negotiation fallback: {name} negotiated {_fmt(negotiated)} Gbit/s{tb_text}, "
                f"i.e. USB4 40G rather than a TB5 80G link")
    return None


def _usb_cap_flag(facts: dict) -> str | None:
    """A 10GbE USB NIC on a 5 Gbit/s port can never beat the port."""
    usb, speed = facts.get("usb_speed_mbps"), facts.get("speed_mbps")
    if usb is None or speed is None or usb >= speed:
        return None
    return (f"USB port caps the NIC: {facts.get('ifname')} link {speed} Mbit/s "
            f"but its USB port runs at {usb} Mbit/s")


def _far_below_flag(facts: dict, measured_gbps: float | None, below_fraction: float) -> str | None:
    """Throughput far under the negotiated rate points at the stack, not the cable."""
    negotiated = facts.get("negotiated_gbps")
    if measured_gbps is None or negotiated is None or measured_gbps >= below_fraction * negotiated:
        return None
    return (f"measured far below negotiated: {facts.get('ifname')} measured "
            f"{_fmt(measured_gbps)} Gbit/s vs negotiated {_fmt(negotiated)} Gbit/s "
            f"({measured_gbps / negotiated:.0%})")


def flags(facts: dict, measured_gbps: float | None, *, expected_gbps: float | None = None,
          below_fraction: float = 0.5) -> list[str]:
    """Human-readable warnings that explain a slow link before anyone blames the model split."""
    found = [_fallback_flag(facts, expected_gbps), _usb_cap_flag(facts),
             _far_below_flag(facts, measured_gbps, below_fraction)]
    return [message for message in found if message]


def asymmetry(a_to_b: float | None, b_to_a: float | None, threshold: float = 0.25,
              a_to_b_range: tuple[float, float] | None = None,
              b_to_a_range: tuple[float, float] | None = None) -> str | None:
    """Flag when one direction is much slower: (hi - lo) / hi > threshold, and, where
    the repeats' (min, max) of each direction are given, the slower one's best repeat
    stays below the faster one's worst: directions whose repeats overlap are not told
    apart (an unshaped link on a busy machine read 25.1 ±5.1 against 14.3 ±7.9 Gbit/s).

    A one-sided link (offload on one end, a USB hub in one direction) skews a split model
    whose activations flow both ways, so a single-direction number would mislead.
    """
    if a_to_b is None or b_to_a is None:
        return None
    hi, lo = max(a_to_b, b_to_a), min(a_to_b, b_to_a)
    if hi <= 0 or (hi - lo) / hi <= threshold:
        return None
    if a_to_b_range is not None and b_to_a_range is not None:
        fast, slow = ((a_to_b_range, b_to_a_range) if a_to_b >= b_to_a
                      else (b_to_a_range, a_to_b_range))
        if slow[1] >= fast[0]:
            return None
    return (f"direction asymmetry: A->B {_fmt(a_to_b)} Gbit/s vs B->A {_fmt(b_to_a)} Gbit/s "
            f"({(hi - lo) / hi:.0%} lower)")
