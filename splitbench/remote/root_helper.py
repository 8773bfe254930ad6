#!/usr/bin/python3 -I
"""splitbench-root: the only thing splitbench runs as root on a host, with fixed verbs.

Installed root-owned (`/usr/local/sbin/splitbench-root`, mode 0755) and named alone in
sudoers, it does exactly these, each with arguments it checks before anything runs:

    link-up IFACE | link-down IFACE      an interface's state
    mtu IFACE BYTES                      its MTU (68-65535)
    addr-replace IFACE ADDR/PREFIX       an address on it (replaced if there)
    addr-del IFACE ADDR/PREFIX           removed
    guard-apply TABLE SPEC               the run's firewall table, built here from SPEC
    guard-delete TABLE                   removed
    guard-list                           the splitbench tables and the changes they hold
    unless-held TABLE TOKEN VERB ...     VERB, unless another run's table holds TOKEN
    wakeup                               hold /dev/cpu_dma_latency at 0 until stdin ends
    version                              the sha256 of this file

An interface is a name of at most 15 characters that exists, never `lo` nor one that
holds a default route (the host's own network stays as it is). An address is a host
address (not loopback, multicast, unspecified). A TABLE is `splitbench_` and 10 hex
digits, and one made by another user is neither replaced nor deleted (its owner's uid is
in its comment). SPEC is JSON: the link interfaces, the link addresses, the run's port
ranges, the interface changes the run holds and the LAN peers; the rules are made here,
never passed through; the uid let through over loopback is the caller's (sudo's
SUDO_UID), not the SPEC's. `ip` and `nft` are run by absolute path from the system's
directories, root-owned and writable by root only; nothing goes through a shell.

Standard library only, Python 3.8 or newer: host B runs it as it is.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import stat
import struct
import subprocess
import sys
from collections.abc import Callable

TABLE = re.compile(r"^splitbench_[0-9a-f]{10}$")
INTERFACE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
# An interface change a run holds (links/guard.py's token): [up:eth1],
# [addr:eth1:10.0.0.2/30], [mtu:eth1:1500]; and a table's owner, [owner:1000].
TOKEN = re.compile(r"^\[(up:[A-Za-z0-9_.-]{1,15}|addr:[A-Za-z0-9_.-]{1,15}:[0-9A-Fa-f:.]+/\d+"
                   r"|mtu:[A-Za-z0-9_.-]{1,15}:\d+|owner:\d+)\]$")
SYSTEM_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
DEVICE = "/dev/cpu_dma_latency"
HELD = "held at 0 us"
MAX_BLOCK = 256  # ports in one run's block at most (links/link.py's block is smaller)


class Refused(Exception):
    """An argument the helper does not accept; the message names it."""


def caller_uid() -> int:
    """Who asked: the user sudo ran this for (SUDO_UID, which sudo sets itself), or the
    real uid of a direct call (root)."""
    if os.geteuid() == 0 and os.environ.get("SUDO_UID", "").isdigit():
        return int(os.environ["SUDO_UID"])
    return os.getuid()


def tool(name: str) -> str:
    """A system tool's absolute path: the first in the system's directories that root
    owns and only root may write (a user's ~/bin or PATH is never searched)."""
    for folder in SYSTEM_DIRS:
        path = os.path.join(folder, name)
        try:
            info = os.stat(path)
        except OSError:
            continue
        if info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return path
    raise Refused(f"no root-owned {name} in {', '.join(SYSTEM_DIRS)}")


def interface_name(name: str) -> str:
    """An interface's name, its form checked: not loopback."""
    if not INTERFACE.match(name) or name in (".", ".."):
        raise Refused(f"not an interface name: {name!r}")
    if name == "lo":
        raise Refused("lo is not a link interface")
    return name


def interface(name: str, routes: dict | None = None) -> str:
    """A link interface's name, checked: it exists, is not loopback, holds no default
    route (`routes`: default routes per family, for tests)."""
    interface_name(name)
    if not os.path.exists(f"/sys/class/net/{name}"):
        raise Refused(f"no interface {name}")
    devices = default_route_devices() if routes is None else routes
    if name in devices:
        raise Refused(f"{name} holds a default route: the host's own network is not "
                      "changed (adopt the link instead)")
    return name


def default_route_devices() -> set:
    """The interfaces that hold a default route, IPv4 or IPv6."""
    found = set()
    for family in ("-4", "-6"):
        listed = subprocess.run([tool("ip"), "-j", family, "route", "show", "default"],
                                capture_output=True, text=True, check=False).stdout
        for route in json.loads(listed or "[]"):
            if route.get("dev"):
                found.add(route["dev"])
    return found


def host_address(text: str, with_prefix: bool = False) -> str:
    """A host address (with its prefix where asked), checked: no loopback, multicast or
    unspecified address, no scope."""
    try:
        parsed = ipaddress.ip_interface(text) if with_prefix else ipaddress.ip_address(text)
    except ValueError:
        raise Refused(f"not an address: {text!r}") from None
    address = parsed.ip if with_prefix else parsed
    if address.is_loopback or address.is_multicast or address.is_unspecified:
        raise Refused(f"not a host address: {text}")
    if with_prefix and "/" not in text:
        raise Refused(f"{text}: give the prefix (ADDR/PREFIX)")
    return str(parsed)


def table(name: str) -> str:
    if not TABLE.match(name):
        raise Refused(f"not a splitbench table: {name!r} (splitbench_ and 10 hex digits)")
    return name


def port_range(text: str) -> str:
    """A run's block of ports, "20480-20511", checked."""
    match = re.match(r"^(\d{1,5})-(\d{1,5})$", str(text))
    if not match:
        raise Refused(f"not a port range: {text!r}")
    low, high = int(match.group(1)), int(match.group(2))
    if not 1024 <= low <= high <= 65535 or high - low >= MAX_BLOCK:
        raise Refused(f"not a run's block of ports: {text}")
    return f"{low}-{high}"


def token(change: str, name: str, value: str = "") -> str:
    """An interface change as the run's table names it: `[up:eth1]` (it was down),
    `[addr:eth1:10.0.0.2/30]`, `[mtu:eth1:1500]` (the MTU it had)."""
    return f"[{change}:{name}{':' + value if value else ''}]"


def by_family(addresses: list) -> dict:
    """Addresses by IP version, without an IPv6 scope (`%eth0`), sorted."""
    out: dict = {4: [], 6: []}
    for addr in sorted({a.split("%")[0] for a in addresses}):
        out[ipaddress.ip_address(addr).version].append(addr)
    return out


def ruleset(interfaces: list, addresses: list, ports: list, name: str,
            uid: int | None = None, made: list = (), lan_peers: dict | None = None,
            lan_macs: dict | None = None) -> str:
    """The nft commands that (re)make the run's table, as one atomic batch: packets
    from interfaces other than loopback and the links' are dropped when they are for a
    link address or a port the run serves on (`ports`: its blocks, "low-high"); with
    `uid`, connections over loopback to those ports from any other user are dropped too
    (the worker has no authentication, and every local user can reach a link address
    through loopback). `lan_peers`: a link over the LAN (interface -> the other host's
    addresses on it): there only the other host reaches the run's ports, and everything
    else on that interface (the user's SSH, the neighbours' traffic to other ports) is
    left alone; `lan_macs` (interface -> the other host's MAC addresses as this host's
    neighbour table holds them): its frames must come from one of them too, so that a
    neighbour who takes the other host's IP address is not let through. `made`: the
    tokens the table's comment holds."""
    names = ", ".join(json.dumps(n) for n in ["lo", *sorted(set(interfaces))])
    served = ", ".join(sorted(set(ports), key=lambda r: int(r.split("-")[0])))
    families = by_family(addresses)
    comment = "".join(sorted(set(made)))
    commands = [
        f"add table inet {name}", f"delete table inet {name}",
        f"add table inet {name}" + (f' {{ comment "{comment}"; }}' if comment else ""),
        f"add chain inet {name} input {{ type filter hook input priority filter - 10; "
        "policy accept; }",
        f"add rule inet {name} input iifname {{ {names} }} accept",
    ]
    for peer_interface, peers in sorted((lan_peers or {}).items()):
        macs = sorted(set((lan_macs or {}).get(peer_interface, [])))
        frames = f"ether saddr {{ {', '.join(macs)} }} " if macs else ""
        for version, family in ((4, "ip"), (6, "ip6")):
            listed = by_family(list(peers))[version]
            if listed:
                commands.append(
                    f"add rule inet {name} input iifname {json.dumps(peer_interface)} "
                    f"{frames}{family} saddr {{ {', '.join(listed)} }} tcp dport "
                    f"{{ {served} }} accept")
    for version, family in ((4, "ip"), (6, "ip6")):
        if families[version]:
            commands.append(f"add rule inet {name} input {family} daddr "
                            f"{{ {', '.join(families[version])} }} drop")
    commands.append(f"add rule inet {name} input tcp dport {{ {served} }} drop")
    if uid is not None:
        # Locally made packets carry their socket's owner (the output hook): another
        # user's connection to the run's ports over loopback ends at its first packet.
        commands += [
            f"add chain inet {name} output {{ type filter hook output priority filter - "
            "10; policy accept; }",
            f'add rule inet {name} output oifname "lo" tcp dport {{ {served} }} '
            f"meta skuid != {uid} drop"]
        # And to a link address at any port: vLLM's ranks listen on ports of their own,
        # outside the run's block. New connections only: a reply (the run's own
        # connection to another user's listener) is left alone.
        for version, family in ((4, "ip"), (6, "ip6")):
            if families[version]:
                commands.append(
                    f'add rule inet {name} output oifname "lo" {family} daddr '
                    f"{{ {', '.join(families[version])} }} ct state new meta skuid != "
                    f"{uid} drop")
    return "; ".join(commands)


def guard_spec(text: str, uid: int) -> dict:
    """SPEC checked field by field; the table's comment gets its owner."""
    try:
        spec = json.loads(text)
    except ValueError:
        raise Refused("SPEC is not JSON") from None
    if not isinstance(spec, dict):
        raise Refused("SPEC is not a JSON object")
    unknown = set(spec) - {"interfaces", "addresses", "ports", "made", "lan_peers",
                           "lan_macs"}
    if unknown:
        raise Refused(f"SPEC has unknown keys: {', '.join(sorted(unknown))}")
    names = [n for n in spec.get("interfaces", []) if n != "lo"]
    for n in names:
        if not INTERFACE.match(str(n)):
            raise Refused(f"not an interface name: {n!r}")
    ports = [port_range(p) for p in spec.get("ports", [])]
    if not ports:
        raise Refused("SPEC names no ports")
    made = [str(t) for t in spec.get("made", [])]
    for change in made:
        if not TOKEN.match(change) or change.startswith("[owner:"):
            raise Refused(f"not an interface change: {change!r}")
    peers = spec.get("lan_peers", {}) or {}
    if not isinstance(peers, dict):
        raise Refused("lan_peers is not an object")
    lan = {}
    for name, listed in peers.items():
        if not INTERFACE.match(str(name)):
            raise Refused(f"not an interface name: {name!r}")
        lan[name] = [host_address(str(a).split("%")[0]) for a in listed]
    macs = spec.get("lan_macs", {}) or {}
    if not isinstance(macs, dict) or not set(macs) <= set(lan):
        raise Refused("lan_macs is not an object of lan_peers' interfaces")
    for listed in macs.values():
        for mac in listed:
            if not MAC.match(str(mac)):
                raise Refused(f"not a MAC address: {mac!r}")
    return {"interfaces": names,
            "addresses": [host_address(str(a).split("%")[0])
                          for a in spec.get("addresses", [])],
            "ports": ports, "made": [*made, f"[owner:{uid}]"], "lan_peers": lan,
            "lan_macs": {name: [str(m) for m in listed] for name, listed in macs.items()}}


def tables(nft: Callable[[list], str] | None = None) -> dict:
    """The splitbench tables on a host and the tokens in their comments. `nft`: runs
    nft with these arguments and gives its output (default: this host's, as root);
    splitbench gives one that runs it on another host through sudo for nft itself."""
    if nft is None:
        path = tool("nft")

        def nft(args: list) -> str:
            return subprocess.run([path, *args], capture_output=True, text=True,
                                  check=False).stdout

    found = {}
    listed = nft(["list", "tables"])
    for name in re.findall(r"^table inet (splitbench_[0-9a-f]{10})$", listed, re.M):
        comments = re.findall(r'^\s*comment "([^"]*)"', nft(["list", "table", "inet", name]),
                              re.M)
        found[name] = re.findall(r"\[[^\]]+\]", "".join(comments))
    return found


def owned(name: str, uid: int, existing: dict) -> None:
    """Refuse a table another user's run made (root may touch any)."""
    owners = [t[len("[owner:"):-1] for t in existing.get(name, []) if t.startswith("[owner:")]
    if uid != 0 and owners and owners[0] != str(uid):
        raise Refused(f"table {name} is another user's run's (uid {owners[0]})")


def commands(verb: str, args: list, uid: int, existing: dict | None = None,
             routes: dict | None = None, on_host: bool = True) -> list:
    """The argument lists a verb runs, every argument checked (Refused otherwise).
    `existing`: the host's splitbench tables (`tables()`), read where a verb needs them;
    `routes`: the default routes' interfaces (tests give them). `on_host` False: the
    commands as a caller elsewhere gives them to a root login or to sudo for `ip` and
    `nft` (`plain`): the arguments' form checked, the host's state not read, the tools
    by name."""
    def want(n: int) -> list:
        if len(args) != n:
            raise Refused(f"{verb} takes {n} argument{'s' if n != 1 else ''}, got {len(args)}")
        return args

    def named(name: str) -> str:
        return interface(name, routes) if on_host else interface_name(name)

    def found(name: str) -> str:
        return tool(name) if on_host else name

    if verb in ("link-up", "link-down"):
        (name,) = want(1)
        state = "up" if verb == "link-up" else "down"
        return [[found("ip"), "link", "set", "dev", named(name), state]]
    if verb == "mtu":
        name, size = want(2)
        if not size.isdigit() or not 68 <= int(size) <= 65535:
            raise Refused(f"not an MTU: {size!r}")
        return [[found("ip"), "link", "set", "dev", named(name), "mtu", size]]
    if verb in ("addr-replace", "addr-del"):
        name, address = want(2)
        action = "replace" if verb == "addr-replace" else "del"
        return [[found("ip"), "addr", action, host_address(address, with_prefix=True),
                 "dev", named(name)]]
    if verb == "guard-apply":
        name, text = want(2)
        spec = guard_spec(text, uid)
        if on_host:
            owned(table(name), uid, tables() if existing is None else existing)
        rules = ruleset(spec["interfaces"], spec["addresses"], spec["ports"], table(name),
                        uid, spec["made"], spec["lan_peers"], spec["lan_macs"])
        return [[found("nft"), rules]]
    if verb == "guard-delete":
        (name,) = want(1)
        if on_host:
            owned(table(name), uid, tables() if existing is None else existing)
        return [[found("nft"), "delete", "table", "inet", table(name)]]
    raise Refused(f"unknown verb {verb!r}")


def plain(verb: str, args: list, uid: int) -> list:
    """A verb's one command (`commands` with `on_host` False): what a root login, or
    sudo for ip and nft themselves, runs in place of the helper."""
    (argv,) = commands(verb, args, uid, on_host=False)
    return argv


def unless_held(args: list, uid: int) -> int:
    """`unless-held TABLE TOKEN VERB ...`: run VERB unless another run's table holds
    TOKEN (two runs on one link each record the change; whichever ends last undoes it)."""
    if len(args) < 3:
        raise Refused("unless-held takes TABLE TOKEN VERB ...")
    own, change, verb, rest = table(args[0]), args[1], args[2], args[3:]
    if not TOKEN.match(change):
        raise Refused(f"not an interface change: {change!r}")
    if verb in ("unless-held", "guard-apply", "wakeup"):
        raise Refused(f"unless-held does not run {verb}")
    existing = tables()
    if any(change in held for name, held in existing.items() if name != own):
        return 0
    return run(commands(verb, rest, uid, existing))


def run(argvs: list) -> int:
    """Each argument list in turn, no shell; the first failure's status."""
    for argv in argvs:
        done = subprocess.run(argv, check=False)
        if done.returncode != 0:
            return done.returncode
    return 0


def hold_wakeup() -> int:
    """Hold the CPUs' wake-up latency request at 0 us until stdin ends (the caller's
    end of the pipe or SSH channel closed, or its process died)."""
    try:
        fd = os.open(DEVICE, os.O_WRONLY)
        os.write(fd, struct.pack("i", 0))
    except OSError as exc:
        print(f"not held: {DEVICE}: {exc.strerror}", flush=True)
        return 1
    print(HELD, flush=True)
    sys.stdin.read()
    os.close(fd)
    return 0


def version() -> str:
    with open(os.path.abspath(__file__), "rb") as source:
        return hashlib.sha256(source.read()).hexdigest()


def main(argv: list) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    verb, args = argv[0], argv[1:]
    uid = caller_uid()
    try:
        if verb == "version":
            print(version())
            return 0
        if verb == "wakeup":
            return hold_wakeup()
        if verb == "guard-list":
            print(json.dumps(tables(), sort_keys=True))
            return 0
        if verb == "unless-held":
            return unless_held(args, uid)
        return run(commands(verb, args, uid))
    except Refused as refused:
        print(f"splitbench-root: refused: {refused}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
