"""The firewall guard of a real pair: what splitbench's servers listen on is reachable
through the link's cable only, never from the hosts' other networks.

The RPC worker has no authentication; vLLM's rendezvous store listens on every address
of host A, and its ranks' collective sockets on the link's addresses, which Linux also
accepts on any other interface. So, before a real link carries anything, each host gets
one nftables table of this run's own (`inet splitbench_<10 hex of the run's state
directory>`, both address families): packets that arrive on an interface other than
loopback and the pair's link interfaces are dropped when they are for a link address,
or for the run's own block of ports (link.py's `Ports`: its workers, probes, vLLM's
rendezvous store and HTTP front) on any address, and another user's connections over
loopback to those ports, or to a link address at any port (vLLM's ranks' own), are
dropped (`meta skuid`). Other ports, other interfaces'
addresses and other runs' blocks are left alone. The table only ever drops; it
is replaced whole when a link of the pair is added, recorded (with its undo) before it
is applied, and deleted at teardown. Another run's table is never touched.

Where splitbench is not root on a host it cannot apply it: the link is refused with the
exact command to run there, unless the pair says `firewall: own` (the user's firewall
does it). Launch checks its servers' listeners either way (`uncovered_listeners`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterable, Mapping, Sequence

from splitbench.errors import SplitbenchError
from splitbench.infra import listeners, privilege, procs
from splitbench.infra.hosts import Host
from splitbench.links.link import Ports
from splitbench.remote import root_helper

TABLE_PREFIX = "splitbench"


class GuardError(SplitbenchError):
    """The guard could not be applied; the message says where and how to do it by hand."""


def table_name() -> str:
    """This run's table: named after its state directory, so that another run (another
    directory, another user) never rebuilds or deletes it."""
    run = hashlib.sha256(str(procs.state_dir()).encode()).hexdigest()[:10]
    return f"{TABLE_PREFIX}_{run}"


def ruleset(interfaces: Iterable[str], addresses: Iterable[str], blocks: Iterable[int],
            table: str, uid: int | None = None, made: Iterable[str] = (),
            lan_peers: Mapping[str, Iterable[str]] | None = None,
            lan_macs: Mapping[str, Iterable[str]] | None = None) -> str:
    """The nft commands that (re)make the run's table (root_helper.ruleset, which the
    root helper builds from the same figures), for the run's `blocks` of ports."""
    return root_helper.ruleset(
        list(interfaces), list(addresses),
        [f"{base}-{Ports(base).last}" for base in sorted(set(blocks))], table, uid,
        list(made), {name: list(peers) for name, peers in (lan_peers or {}).items()},
        {name: list(macs) for name, macs in (lan_macs or {}).items()})


# An interface change as the run's table names it: `[up:eth1]` (it was down),
# `[addr:eth1:10.0.0.2/30]`, `[mtu:eth1:1500]` (the MTU it had).
token = root_helper.token


def made_elsewhere(host: Host) -> set[str]:
    """The interface changes other runs' tables on `host` hold (their `token`s): a
    change already so on an interface may be another run's, for which this run then
    shares the undo. Empty where splitbench may not read the host's tables."""
    if not privilege.can(host, privilege.FOR_GUARD):
        return set()
    if privilege.through_helper(host):
        listed = host.run(["sudo", "-n", privilege.HELPER, "guard-list"], check=False)
        try:
            tables = json.loads(listed.stdout or "{}")
        except ValueError:
            return set()
    else:  # root, or sudo for nft itself: the helper's reading, through that nft
        nft = privilege.as_root(host, ["nft"])
        tables = root_helper.tables(
            lambda args: host.run([*nft, *args], check=False).stdout)
    return {t for name, held in tables.items() if name != table_name() for t in held}


# Runs `undo` unless another run's table on the host still holds `token`: two runs on
# one link each record the change, and whichever ends last undoes it.
_UNLESS_HELD = r"""own=$1 token=$2 nft=$3; shift 3
for t in $($nft list tables | sed -n 's/^table inet \(splitbench_[0-9a-f]*\)$/\1/p'); do
  [ "$t" = "$own" ] && continue
  $nft list table inet "$t" | grep -qF -- "$token" && exit 0
done
exec "$@"
"""


def shared_undo(host: Host, change: str, undo: Sequence[str]) -> list[str]:
    """The helper verb `undo` made only where no other run's table holds `change`: the
    command teardown records for an interface change of a guarded link (the helper's
    `unless-held`, or the same in a shell around root's own command)."""
    if privilege.through_helper(host):
        return ["sudo", "-n", privilege.HELPER, "unless-held", table_name(), change, *undo]
    nft = " ".join(privilege.as_root(host, ["nft"]))
    return ["sh", "-c", _UNLESS_HELD, "sh", table_name(), change, nft,
            *privilege.root_command(host, *undo)]


def _key(host: Host) -> str:
    """The host's change record: one table per host and run, whichever link made it."""
    identity = json.dumps(host.ssh_settings() if host.remote else host.netns, sort_keys=True)
    return f"nft-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def cover(host: Host, interface: str, address: str, ports: Ports, firewall: str,
          where: str, made: Iterable[str] = (), peer: str | None = None,
          peer_mac: str | None = None) -> None:
    """Make `interface` (and `address` on it) one of the host's link ends in the run's
    table, and `ports` (the run's block for the pair) among the ports it keeps off
    other interfaces, recorded (with its undo) before it is applied; with the pair's
    `firewall: own`, left to the user. `made`: the tokens of the interface changes the
    run holds there (named in the table's comment). `peer`: the interface is the LAN
    (real.lan_interface) and this the other host's address on it, the one address let
    through to the run's ports there, from `peer_mac` alone where known (the MAC this
    host's neighbour table holds for it); the interface and its address stay open to
    everything else. Raises GuardError when it cannot, with the command that would."""
    if firewall == "own":
        return
    table = table_name()
    known = procs.change(_key(host)) or {"interfaces": [], "addresses": [], "blocks": []}
    lan_peers = {name: list(peers) for name, peers in known.get("lan_peers", {}).items()}
    lan_macs = {name: list(macs) for name, macs in known.get("lan_macs", {}).items()}
    if peer is None:
        interfaces = sorted({*known["interfaces"], interface})
        addresses = sorted({*known["addresses"], address})
    else:
        interfaces, addresses = sorted(known["interfaces"]), sorted(known["addresses"])
        lan_peers[interface] = sorted({*lan_peers.get(interface, []), peer})
        if peer_mac:
            lan_macs[interface] = sorted({*lan_macs.get(interface, []), peer_mac})
    blocks = sorted({*known.get("blocks", []), ports.base})
    held = sorted({*known.get("made", []), *made})
    uid = privilege.login_uid(host)
    commands = ruleset(interfaces, addresses, blocks, table, uid, held, lan_peers, lan_macs)
    if not privilege.can(host, privilege.FOR_GUARD):
        raise GuardError(
            f"{where}: splitbench is neither root on host {host.name} nor allowed nft "
            "there through sudo -n, so it cannot make sure its servers are reachable "
            "through the link only. Allow it (python -m splitbench doctor prints the "
            f"sudoers line), or run there, as root: nft {shlex.quote(commands)} (and nft "
            f"delete table inet {table} when done), then set the pair's firewall: own")
    undo = privilege.root_command(host, "guard-delete", table)
    # Recorded before it is applied: a run killed between the two still has the table
    # deleted at teardown (the batch is atomic: a failed one leaves the table as it was).
    procs.record_change(_key(host), host.name,
                        host.ssh_settings() if host.remote else None,
                        undo if host.remote else host.wrap(undo),
                        # nft's word for a table that is not there
                        gone_if="No such file or directory",
                        interfaces=interfaces, addresses=addresses, blocks=blocks,
                        made=held, table=table, lan_peers=lan_peers, lan_macs=lan_macs)
    spec = {"interfaces": interfaces, "addresses": addresses, "made": held,
            "ports": [f"{base}-{Ports(base).last}" for base in blocks],
            "lan_peers": lan_peers, "lan_macs": lan_macs}
    done = host.run(privilege.root_command(host, "guard-apply", table, json.dumps(spec)),
                    check=False)
    if done.returncode != 0:
        raise GuardError(f"{where}: host {host.name}: nft could not apply the link guard "
                         f"({(done.stderr or done.stdout).strip()[-300:]}); is nftables "
                         "installed there?")


# A listener on every address: `0.0.0.0:port`, `*:port`, `[::]:port`.
def uncovered_listeners(host: Host, sessions: Iterable[int], covered: Ports | None,
                        kept_to: Iterable[str]) -> list[str]:
    """The listeners beyond the link that processes of `sessions` (each launch process
    starts a session of its own, and its children stay in it) hold on `host`, TCP and
    UDP: on every address, or on one that is neither loopback nor one of `kept_to` (the
    link's addresses: the LAN's, say), at a port the guard does not cover (`covered`:
    the run's block; None where the pair's firewall is its own, and nothing is covered
    by splitbench): reachable from a network the host is on besides the cable. UDP is
    never covered: the guard's port rule is TCP's."""
    sessions = {int(s) for s in sessions}
    if not sessions:
        return []
    private = {*kept_to, "127.0.0.1", "::1"}
    ps = host.run(["ps", "-eo", "pid=,sid="]).stdout.split()
    ours = {int(pid) for pid, sid in zip(ps[::2], ps[1::2], strict=False)
            if int(sid) in sessions}
    found = []
    for listener in listeners.listening(host, processes=True):
        address = listener.local.rsplit(":", 1)[0].strip("[]").split("%")[0]
        if address in private or not listener.pids & ours:
            continue
        if covered is not None and listener.protocol == "tcp" and listener.port in covered:
            continue
        kind = "" if listener.protocol == "tcp" else " " + listener.protocol.upper()
        found.append(f"{listener.local}{kind} ({', '.join(listener.names)})")
    return found
