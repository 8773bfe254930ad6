"""A real pair: host A is this machine, host B another reached over SSH, each link a
cable between two named interfaces (`links/real.py` addresses them, or adopts their
addresses, and proves that B is reached over exactly that interface)."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from splitbench.contracts.slices import HostSlice, LinkSlice, SweepSlice
from splitbench.infra import privilege, turns
from splitbench.infra.hosts import Host, host_from_spec
from splitbench.links import lab, readiness, real
from splitbench.links.link import Link
from splitbench.links.readiness import BAD, OK, Line
from splitbench.pairs.base import PairKind, placed

if TYPE_CHECKING:  # a cell's job asks its kind for its link, and must not pay for pydantic
    from splitbench.configuration import Config, LinkSpec, Pair


class OverSsh(PairKind):
    name = "ssh"
    on_this_machine = False
    sweep_on_baseline_link = True

    def link_keys(self, pair: Pair, link: str, given: dict[str, Any]) -> dict[str, Any]:
        return {"hosts": pair.hosts.given(), "firewall": pair.firewall}

    def ensure_link(self, spec: LinkSlice) -> Link:
        return real.ensure(spec)

    def sweep_link(self, spec: SweepSlice, index: int, delay_ms: float) -> Link:
        # No netem and no root on either host: the delay is a relay on host A.
        return lab.relayed(real.ensure(spec["link"]), index, delay_ms)

    def turn(self, spec: LinkSlice) -> contextlib.AbstractContextManager[None]:
        return turns.turn(spec["pair"], host_from_spec("b", spec["hosts"]["b"]))

    def doctor_lines(self, config: Config, pair: str, spec: Pair) -> list[Line]:
        """readiness.pair_hosts, then what the links ask of the hosts: nft and root for
        the firewall guard, root for the links' addresses, each link's interfaces."""
        hosts_spec = spec.hosts.given()
        host_a = host_from_spec("a", hosts_spec["a"])
        host_b = host_from_spec("b", hosts_spec["b"])
        guarded = spec.firewall == "guard"
        addressed = [name for name, link in spec.links.items() if not link.adopt]
        lines = readiness.pair_hosts(pair, hosts_spec)
        reached = readiness.reached(lines)
        hosts = (host_a, host_b) if reached else (host_a,)
        if guarded:
            lines += [line for host in hosts for line in readiness.tools(host, pair, ("nft",))]
        # Each host holds the wake-up latency request as root or through sudo -n (A's
        # too, where splitbench runs as an ordinary user).
        lines += [rights(host, pair, addressed, guarded, config.hold_wakeup_latency)
                  for host in hosts]
        if not reached:
            return lines
        # A host without ip has its own ✗ line; none of its interfaces can be looked at.
        with_ip = [host for host in (host_a, host_b) if not host.missing_tools(["ip"])]
        for name, link in spec.links.items():
            lines += _interfaces(pair, name, link, with_ip, spec.firewall)
        return lines

    def host_text(self, pair: str, side: str, host: HostSlice,
                  emulations: set[str]) -> str:
        where = placed(host)
        if side == "a":
            return f"{', '.join(where) or 'this machine'} (runs splitbench)"
        if host.get("ssh"):
            port = f" port {host['ssh_port']}" if host.get("ssh_port") else ""
            return ", ".join([f"ssh {host['ssh']}{port}", *where])
        return ", ".join(["this machine", *where])


def rights(host: Host, pair: str, addressed: list[str], guarded: bool,
           wakeup: bool = False) -> Line:
    """Root on the host, or the root helper through sudo -n for what the pair needs as
    root there (addresses for links it addresses, the guard, the wake-up latency where
    the config holds it); an older line that allows ip and nft themselves works and is
    called root-equivalent; else ✗ with how to install the helper and its sudoers line."""
    needs = {}
    if addressed:
        needs[privilege.FOR_ADDRESSES] = f"addresses for links {', '.join(addressed)}"
    if guarded:
        needs[privilege.FOR_GUARD] = "the firewall guard"
    if wakeup:
        needs[privilege.FOR_WAKEUP] = "holding the CPUs' wake-up latency"
    side = host.name.upper()
    if privilege.is_root(host):
        return Line(OK, pair, f"root on host {side}")
    if not needs:
        return Line(OK, pair, f"not root on host {side}, and nothing needs it (every link "
                              "adopted, firewall: own)")
    user = privilege.login_user(host)
    helper = privilege.helper_state(host)
    if helper == "ready":
        privilege.discard_copy(host)  # the copy the doctor put there to be installed
        return Line(OK, pair, f"host {side}: {_listed(list(needs.values()), 'and')} through "
                              f"{privilege.HELPER} (fixed verbs, through sudo -n for {user}; "
                              f"no root login); everything else runs as {user}")
    install = ("install sudo there (Debian: apt-get install sudo), then "
               if privilege.tool_path(host, "sudo") is None else "")
    how = (f"{install}as root there: {privilege.helper_install(host)}, then visudo -f "
           f"/etc/sudoers.d/splitbench: {privilege.helper_line(host)}")
    if helper == "outdated":
        return Line(BAD, pair, f"host {side}: {privilege.HELPER} is not this splitbench's "
                               "(another version)", f"install this one: {how}")
    refused = [tool for tool in needs if not privilege.sudo_allows(host, tool)]
    if not refused:
        wide = [tool for tool in needs if tool in (privilege.FOR_ADDRESSES,
                                                   privilege.FOR_GUARD)]
        said = (f"; root-equivalent: sudo runs {_listed(wide, 'and')} with any arguments "
                f"for {user} (ip netns exec opens a root shell)" if wide else "")
        return Line(OK, pair, f"host {side}: {', '.join(needs)} as root through sudo -n "
                              f"for {user}{said}", f"narrow it to the helper: {how}"
                    if wide else "")
    # The other way round each refusal: only those that apply to this config.
    instead = [text for tool, text in (
        (privilege.FOR_ADDRESSES, f"adopt: true on links {', '.join(addressed)}"),
        (privilege.FOR_GUARD, "firewall: own on the pair"),
        (privilege.FOR_WAKEUP, "hold_wakeup_latency: false (top level)")) if tool in refused]
    return Line(BAD, pair, f"not root on host {side}, and sudo -n runs neither "
                           f"{privilege.HELPER} nor {_listed(refused, 'or')} for {user}, "
                           f"which {_listed([needs[tool] for tool in refused], 'and')} need",
                f"{how} — or set {_listed(instead, 'and')} (docs/two-machines.md)")


def _listed(items: list[str], last: str) -> str:
    """"a", "a or b", "a, b or c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def _interfaces(pair: str, name: str, link: LinkSpec, hosts: list[Host],
                firewall: str) -> list[Line]:
    lines = []
    for host in hosts:
        side = host.name
        ifname = getattr(link, f"interface_{side}")
        where = f"link {name}, host {side.upper()}"
        shown = host.run(["ip", "-j", "link", "show", "dev", ifname], check=False)
        if shown.returncode != 0:
            lines.append(Line(BAD, pair, f"{where}: no interface {ifname}",
                              f"name the interface of the cable (interface_{side})"))
            continue
        try:
            on_lan = real.lan_interface(host, ifname, f"link {name}", link.adopt, firewall)
        except real.SetupError as exc:
            lines.append(Line(BAD, pair, f"{where}: {exc}"))
            continue
        if link.adopt:  # refused now, not at its link job minutes later
            try:
                real.adoptable_address(host, ifname, f"link {name}")
            except real.SetupError as exc:  # it names the link, the host and the interface
                lines.append(Line(BAD, pair, str(exc)))
                continue
        info = json.loads(shown.stdout)[0]
        speed = host.run(["cat", f"/sys/class/net/{ifname}/speed"], check=False).stdout.strip()
        rate = f"{speed} Mbit/s" if speed.isdigit() and int(speed) > 0 else "speed not reported"
        said = (f"{where}: {ifname} {info.get('operstate', '?').lower()}, "
                f"MTU {info.get('mtu')}, {rate}" + (
                    "; the LAN (it holds the default route): compared as it is, only the "
                    "other host let through to the run's ports on it" if on_lan else ""))
        if link.mtu and info.get("mtu") != link.mtu and link.adopt:
            lines.append(Line(BAD, pair, f"{said}; the config says MTU {link.mtu}",
                              "set it there, or drop mtu (an adopted link is not changed)"))
        else:
            lines.append(Line(OK, pair, said))
    return lines
