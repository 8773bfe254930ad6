"""`python -m splitbench doctor --configfile my-pairs.yaml`: is each pair ready to run?

One line per requirement and pair, before anything is started or changed: ✓ when it
holds, ✗ with what to do when it does not, · for what is only worth knowing (an optional
right, the clocks, the matrix's length). Exits 1 on any ✗. The checks are the ones the
run itself makes later, asked now: a run that would fail at a pair's toolchain or link
says so here first, naming host, tool, interface or key.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from splitbench import configuration, plan, results
from splitbench.configuration import Config, LinkSpec, Pair
from splitbench.infra import files, privilege
from splitbench.infra.hosts import Host, host_from_spec
from splitbench.links import readiness
from splitbench.links.readiness import BAD, NOTE, OK, Line

# Free space the results of a run need (Parquet, logs, charts; a few hundred MB at most).
DISK_MIN_GIB = 1.0


def check(config: Config, results_dir: str | Path = "results") -> list[Line]:
    """Every pair's lines, then the run's own (disk, the matrix's length)."""
    lines = []
    for pair, spec in config.pairs.items():
        lines += (ssh_pair(config, pair, spec) if spec.mode == "ssh"
                  else embedded_pair(config, pair, spec))
    lines += run_lines(config, results_dir)
    return lines


def before_run(config: Config, on_cluster: bool,
               results_dir: str | Path = "results") -> list[Line]:
    """What `snakemake all` does first, before any job: every pair's lines, printed and
    kept in results/doctor.txt. A ✗ does not stop the run: what it names fails (or falls
    back, as the line says) at its own job, as a result in the tables, while the rest is
    measured; the ✗ and its fix come now rather than minutes later. On a cluster a pair's
    hosts are its nodes, not this one, so only the run's own lines (disk, the matrix) are
    checked here."""
    try:
        lines = run_lines(config, results_dir) if on_cluster else check(config, results_dir)
    except Exception as exc:  # the doctor's own fault must not cost the run: say it
        lines = [Line(BAD, "doctor", f"the checks themselves failed: "
                                     f"{type(exc).__name__}: {exc}")]
    bad = sum(line.mark == BAD for line in lines)
    said = ["splitbench doctor, before anything starts "
            "(python -m splitbench doctor for these alone):",
            *map(str, lines)]
    if on_cluster:
        said.append(f"{NOTE} pairs: their hosts are cluster nodes, not this machine: run "
                    "python -m splitbench doctor on each pair's host A")
    said.append(f"splitbench doctor: {bad} problem(s) above; the run goes on, and each one "
                "shows where it bites, as a result (Ctrl-C now to fix them first)"
                if bad else "splitbench doctor: ready")
    text = "\n".join(said) + "\n"
    print(text, end="", flush=True)
    files.write_text(Path(results.under(Path(results_dir), results.DOCTOR)), text)
    return lines


def embedded_pair(config: Config, pair: str, spec: Pair) -> list[Line]:
    lines = readiness.pair_hosts(pair, spec.hosts.given())
    shaped = [name for name, link in spec.links.items() if link.rate_gbit or link.delay_ms]
    if os.geteuid() == 0:
        lines.append(Line(OK, pair, "root: each host a network namespace, links shaped "
                                    "with tc"))
    elif shaped:
        lines.append(Line(BAD, pair, f"not root: links {', '.join(shaped)} cannot be shaped "
                                     "(the lab falls back to the shared loopback)",
                          "run as root (network namespaces and tc need it)"))
    lines += _toolchain(config, pair, spec)
    return lines


def ssh_pair(config: Config, pair: str, spec: Pair) -> list[Line]:
    """readiness.pair_hosts, then what the links and models ask of the hosts: nft and
    root for the firewall guard, root for the links' addresses, the same llama.cpp
    build, each link's interfaces."""
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
    lines += [_rights(host, pair, addressed, guarded, config.hold_wakeup_latency)
              for host in hosts]
    if not reached:
        return lines
    lines += _toolchain(config, pair, spec)
    # A host without ip has its own ✗ line; none of its interfaces can be looked at.
    with_ip = [host for host in (host_a, host_b) if not host.missing_tools(["ip"])]
    for name, link in spec.links.items():
        lines += _interfaces(pair, name, link, with_ip, spec.firewall)
    return lines


def _rights(host: Host, pair: str, addressed: list[str], guarded: bool,
            wakeup: bool = False) -> Line:
    """Root on the host, or sudo -n for exactly the tools the pair needs as root there
    (ip for links it addresses, nft for the guard, tee of the wake-up latency request
    where the config holds it); else ✗ with the sudoers line."""
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
    refused = [tool for tool in needs if not privilege.sudo_allows(host, tool)]
    if not refused:
        return Line(OK, pair, f"host {side}: {', '.join(needs)} as root through sudo -n "
                              f"for {user} (no root login); everything else runs as {user}")
    line = privilege.sudoers_line(host, list(needs))
    install = ("install sudo there (Debian: apt-get install sudo), then "
               if privilege.tool_path(host, "sudo") is None else "")
    # The other way round each refusal: only those that apply to this config.
    instead = [text for tool, text in (
        (privilege.FOR_ADDRESSES, f"adopt: true on links {', '.join(addressed)}"),
        (privilege.FOR_GUARD, "firewall: own on the pair"),
        (privilege.FOR_WAKEUP, "hold_wakeup_latency: false (top level)")) if tool in refused]
    return Line(BAD, pair, f"not root on host {side}, and sudo -n does not run "
                           f"{_listed(refused, 'or')} for {user}, which "
                           f"{_listed([needs[tool] for tool in refused], 'and')} need",
                f"{install}allow it there (visudo -f /etc/sudoers.d/splitbench): {line} — "
                f"or set {_listed(instead, 'and')} (docs/two-machines.md)")


def _listed(items: list[str], last: str) -> str:
    """"a", "a or b", "a, b or c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def _toolchain(config: Config, pair: str, spec: Pair) -> list[Line]:
    from splitbench.backends.llamacpp import toolchain

    if not configuration.llamacpp_models(config):
        return []
    source = config.toolchain.source
    hosts = spec.hosts.given()
    where = f"pair '{pair}'"
    try:
        a, b = toolchain.describe_pair(source, hosts, where)
    except toolchain.TOOLCHAIN_FAILURES as exc:
        return [Line(BAD, pair, str(exc).replace(f"{where}: ", ""),
                     "install the same llama.cpp build on both hosts (./bootstrap.sh, or "
                     "toolchain.source: path with each host's bin_dir)")]
    if b.get("carried_from"):
        return [Line(OK, pair, f"host B has no build of its own: host A's worker runs "
                               f"there, copied by each run and removed after "
                               f"({a['llama_server_version']}; tried on B just now)")]
    return [Line(OK, pair, f"the same llama.cpp build on both hosts "
                           f"({a['llama_server_version']})")]


def _interfaces(pair: str, name: str, link: LinkSpec, hosts: list[Host],
                firewall: str) -> list[Line]:
    from splitbench.links import real

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


def run_lines(config: Config, results_dir: str | Path) -> list[Line]:
    from splitbench import estimate

    where = Path(results_dir)
    probe = where if where.exists() else Path.cwd()
    free = shutil.disk_usage(probe).free / 2**30
    lines = [Line(OK if free >= DISK_MIN_GIB else BAD, "run",
                  f"{free:.1f} GiB free for {where}/",
                  "" if free >= DISK_MIN_GIB else f"free at least {DISK_MIN_GIB:g} GiB")]
    cells = plan.cells(config)
    blocks = plan.blocks(config)
    summary = Path(results.under(where, results.SUMMARY))
    said = f"the matrix: {len(cells)} cells in {len(blocks)} blocks"
    if summary.exists():
        import pandas as pd

        speeds = estimate.speeds_from_summary(pd.read_parquet(summary))
        launch_s = estimate.launch_seconds_from(where)
        try:
            minutes = estimate.expected_seconds(
                config, speeds, launch_s or estimate.LAUNCH_S)["total"] / 60
            said += (f", about {minutes:.0f} min at this workdir's last measured speeds"
                     + (f" and launches of {launch_s:.0f} s" if launch_s else ""))
        except ValueError:
            said += " (no estimate: the last summary lacks some model or context)"
    else:
        said += " (no estimate before a first run measures the models' speeds)"
    lines.append(Line(NOTE, "run", said))
    return lines
