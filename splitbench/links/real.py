"""Links between real hosts: bring the interface up, address it (or adopt its
addresses), and prove that A reaches B over exactly that interface.

Host A is the machine splitbench runs on; host B is reached over SSH (or is this
machine too, for a pair of interfaces looped by cable). What setup changes on an
interface (up, an address, the MTU) is recorded with its undo, like the firewall guard
each host gets once its link is proved (guard.py), and the run's teardown undoes both:
the interfaces are left as they were found.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json

from splitbench.contracts.slices import LinkSlice
from splitbench.errors import SplitbenchError
from splitbench.infra import files, privilege, procs
from splitbench.infra.hosts import Host, HostError, host_from_spec
from splitbench.links import guard, ports
from splitbench.links.link import Link
from splitbench.remote import root_helper


class SetupError(SplitbenchError):
    """A real link could not be set up; the message names the pair, link and host."""


def ensure(spec: LinkSlice) -> Link:
    """The ready real link of an SSH pair's link slice: set up once per run (its record
    kept in the run's state), then reused."""
    key = f"{spec['pair']}__{spec['link']}"
    record_path = procs.state_dir() / "links" / f"{key}.json"
    with procs.locked("lab"):
        known = files.read_json(record_path)
        if known is not None:
            return Link.from_json(known)
        link = _set_up(spec)
        files.write_json(record_path, link.to_json())
        return link


def _set_up(spec: LinkSlice) -> Link:
    where = f"pair '{spec['pair']}', link '{spec['link']}'"
    host_a = host_from_spec("a", spec["hosts"]["a"])
    host_b = host_from_spec("b", spec["hosts"]["b"])
    applied: list[list[str]] = []
    firewall = spec.get("firewall", "guard")
    guarded = firewall == "guard"
    hosts = {"a": host_a, "b": host_b}
    ends, held, on_lan = {}, {}, {}
    # A's end first, checked and set up: B may be reachable only through this very link.
    for side, host in hosts.items():
        ifname = spec[f"interface_{side}"]
        _require_interface(host, ifname, where)
        on_lan[side] = lan_interface(host, ifname, where, bool(spec.get("adopt")), firewall)
        if spec.get("adopt"):
            ends[side], held[side] = adoptable_address(host, ifname, where), []
        else:
            ends[side], held[side] = _configure(
                host, ifname, spec[f"addr_{side}"], spec.get("prefix", 30), spec.get("mtu"),
                where, applied, guarded)
    # Once the interfaces are up: B may be reached through this very link.
    try:
        run_ports = ports.for_pair(spec["pair"], host_a, host_b)
    except (ports.PortsError, HostError) as exc:
        raise SetupError(str(exc)) from exc
    link = Link(
        spec["pair"], spec["link"], host_a, host_b, ends["a"], ends["b"], ends["b"],
        spec["interface_a"], spec["interface_b"],
        {"mode": "real", "rate": "none", "delay": "none", "rate_gbit_a_to_b": None,
         "rate_gbit_b_to_a": None, "delay_ms": 0.0, "applied": applied,
         "firewall": spec.get("firewall", "guard"),
         "lan": [side for side in hosts if on_lan[side]]},
        run_ports,
    )
    reply = host_a.run(["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", "-I",
                        link.interface_a, link.addr_b], check=False, timeout=30)
    if reply.returncode != 0:
        raise SetupError(f"{where}: host a cannot reach host b at {link.addr_b} over "
                         f"{link.interface_a}: {(reply.stdout + reply.stderr).strip()[-300:]}")
    # Before anything listens on the link: reachable through its cable only.
    for side, host, ifname, addr, peer in (
            ("a", host_a, link.interface_a, link.addr_a, link.addr_b),
            ("b", host_b, link.interface_b, link.addr_b, link.addr_a)):
        try:
            guard.cover(host, ifname, addr, run_ports, firewall, where, held[side],
                        peer=peer if on_lan[side] else None,
                        peer_mac=neighbour_mac(host, ifname, peer) if on_lan[side] else None)
        except (guard.GuardError, HostError) as exc:
            raise SetupError(str(exc)) from exc
    return link


def neighbour_mac(host: Host, ifname: str, address: str) -> str | None:
    """The MAC address `host`'s neighbour table holds for `address` on `ifname` (the
    ping above made the entry): the source of the frames the other host sends on a
    shared LAN. None where there is none (a point-to-point link, no ARP)."""
    shown = host.run(["ip", "-j", "neigh", "show", "to", address.split("%")[0], "dev",
                      ifname], check=False)
    found = json.loads(shown.stdout or "[]") if shown.returncode == 0 else []
    macs = [entry["lladdr"].lower() for entry in found if entry.get("lladdr")]
    return macs[0] if macs else None


def _require_interface(host: Host, ifname: str, where: str) -> None:
    try:
        result = host.run(["ip", "-j", "link", "show", "dev", ifname], check=False)
    except HostError as exc:
        raise SetupError(f"{where}: {exc}") from exc
    if result.returncode != 0:
        raise SetupError(f"{where}: host {host.name} has no interface '{ifname}' "
                         f"({result.stderr.strip()})")


def lan_interface(host: Host, ifname: str, where: str, adopt: bool = False,
                  firewall: str = "guard") -> bool:
    """Whether a link interface is the host's LAN (it holds the default route). A link is
    normally the cable between the two hosts; the LAN is one only as it is (`adopt`:
    addressing it would change the user's network) and behind the run's guard, which
    lets only the other host reach the run's ports on it (the RPC worker has no
    authentication, and every neighbour on the LAN could reach it). Otherwise refused,
    naming the host, the interface and both ways on."""
    for family in ("-4", "-6"):
        shown = host.run(["ip", "-j", family, "route", "show", "default"], check=False)
        routes = json.loads(shown.stdout or "[]") if shown.returncode == 0 else []
        if not any(route.get("dev") == ifname for route in routes):
            continue
        said = (f"{where}: host {host.name}'s interface {ifname} holds the default route "
                f"(IPv{family[1]}): it leads to the LAN")
        if not adopt:
            raise SetupError(
                f"{said}, not to the other host; name the interface of the cable between "
                "the two hosts (interface_a/interface_b), or set adopt: true to compare "
                "the LAN itself (nothing on it is changed, and the run's guard lets only "
                "the other host reach the run's ports on it)")
        if firewall != "guard":
            raise SetupError(
                f"{said}, where every neighbour could reach the run's servers: a LAN link "
                "needs the pair's firewall: guard, which lets only the other host reach "
                "the run's ports on it")
        return True
    return False


def adoptable_address(host: Host, ifname: str, where: str) -> str:
    """The interface's IPv4 address as it is (link-local ones included). One with only
    IPv6 (thunderbolt-net comes up with fe80:: alone) is refused with why: the RPC
    worker binds IPv4 only."""
    shown = json.loads(host.run(["ip", "-j", "addr", "show", "dev", ifname]).stdout)
    infos = [info for entry in shown for info in entry.get("addr_info", [])]
    for info in infos:
        if info.get("family") == "inet":
            return info["local"]
    ipv6 = [info["local"] for info in infos if info.get("family") == "inet6"]
    only = (f" (it has only IPv6 {', '.join(ipv6)}; llama.cpp's ggml-rpc-server binds "
            "IPv4 only)" if ipv6 else "")
    raise SetupError(f"{where}: host {host.name}'s interface {ifname} has no IPv4 address "
                     f"to adopt{only}: give addr_a/addr_b instead of adopt (the run adds "
                     "them and removes them at its end), or add one by hand (ip addr add "
                     f"169.254.10.1/16 dev {ifname})")


def _configure(host: Host, ifname: str, addr: str, prefix: int, mtu: int | None, where: str,
               applied: list, guarded: bool) -> tuple[str, list[str]]:
    """Bring the interface up, give it the link's address and MTU; each change that was
    not already so is recorded with its undo, which the run's teardown makes (the address
    removed, the MTU and the down state restored), so the user's interface is left as it
    was found. On a guarded link, a change already so that another run's table holds
    (a second run on the same link) is recorded too, and each undo is made only by the
    last run holding it. Returns the address and the tokens of the changes held."""
    ipaddress.ip_interface(f"{addr}/{prefix}")  # a typo fails here, before any change
    before = json.loads(host.run(["ip", "-j", "addr", "show", "dev", ifname]).stdout)[0]
    had = {f"{a['local']}/{a['prefixlen']}" for a in before.get("addr_info", [])}
    elsewhere = guard.made_elsewhere(host) if guarded else set()
    # (the helper verb, its undo or None where nothing changes, the change's token)
    steps: list[tuple[tuple[str, ...], tuple[str, ...] | None, str]] = []
    up = guard.token("up", ifname)
    if "UP" not in before.get("flags", []) or up in elsewhere:
        steps.append((("link-up", ifname), ("link-down", ifname), up))
    address = guard.token("addr", ifname, f"{addr}/{prefix}")
    steps.append((("addr-replace", ifname, f"{addr}/{prefix}"),
                  None if f"{addr}/{prefix}" in had and address not in elsewhere
                  else ("addr-del", ifname, f"{addr}/{prefix}"), address))
    if mtu:
        found = before.get("mtu")
        # Another run set the MTU already: its token names the one the interface had.
        shared = [t for t in elsewhere if t.startswith(f"[mtu:{ifname}:")]
        if mtu != found or shared:
            original = shared[0][len(f"[mtu:{ifname}:"):-1] if shared else str(found)
            steps.append((("mtu", ifname, str(mtu)), ("mtu", ifname, original),
                          guard.token("mtu", ifname, original)))
    held = []
    for verb, undo, change in steps:
        try:
            shown = root_helper.plain(verb[0], list(verb[1:]), 0)  # what it does, as ip
            # The undo first: a run killed between the change and its record would
            # leave the change behind. Undoing a change that never happened is harmless
            # (the down state, the MTU it had; an address that is not there is "gone").
            if undo:
                _record_undo(host, guard.shared_undo(host, change, undo) if guarded
                             else privilege.root_command(host, *undo),
                             f"{where} {host.name} {' '.join(shown[:-2])}")
            result = host.run(privilege.root_command(host, *verb), check=False)
        except (privilege.PrivilegeError, root_helper.Refused) as exc:
            raise SetupError(f"{where}: {exc}") from exc
        if result.returncode != 0:
            raise SetupError(f"{where}: host {host.name}: {' '.join(shown)} failed "
                             f"({result.stderr.strip()}); set it up by hand and use "
                             "adopt: true, or let splitbench make it there "
                             "(python -m splitbench doctor says how)")
        applied.append([f"host {host.name}", *shown])
        if undo:
            held.append(change)
    return addr, held


def _record_undo(host: Host, undo: list[str], what: str) -> None:
    key = "interface-" + hashlib.sha256(
        json.dumps([host.ssh_settings() if host.remote else None, what]).encode()
    ).hexdigest()[:16]
    procs.record_change(key, host.name, host.ssh_settings() if host.remote else None,
                        undo if host.remote else host.wrap(undo),
                        # ip's words for an address or a device that is gone already
                        gone_if=["Cannot assign requested address", "Cannot find device"])
