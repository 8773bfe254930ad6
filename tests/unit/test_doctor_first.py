"""What `snakemake all` does first (doctor.before_run): the doctor's lines, printed and
kept in results/doctor.txt; on a cluster only the run's own; the doctor's own fault a ✗
line, never the run's end. The real run's doctor is held by the workflow tests (a ready
tiny pair; an SSH pair that cannot be reached)."""

from __future__ import annotations

import subprocess

from splitbench.configuration import parsed
from splitbench.infra import privilege
from splitbench.pairs import ssh as ssh_kind
from splitbench.remote import root_helper
from splitbench.workflow import doctor
from tests.conftest import tiny_config as tiny


def test_on_a_cluster_only_the_runs_own_lines_are_checked_here(tmp_path, capsys):
    lines = doctor.before_run(parsed(tiny()), on_cluster=True, results_dir=tmp_path)
    assert {line.pair for line in lines} == {"run"}  # no pair's hosts: they are nodes
    said = (tmp_path / "doctor.txt").read_text()
    assert said == capsys.readouterr().out
    assert "· pairs: their hosts are cluster nodes, not this machine" in said
    assert said.endswith("splitbench doctor: ready\n")


def test_the_doctors_own_fault_is_a_line_not_the_runs_end(tmp_path, capsys, monkeypatch):
    def broken(*_):
        raise KeyError("hosts")

    monkeypatch.setattr(doctor, "check", broken)
    lines = doctor.before_run(parsed(tiny()), on_cluster=False, results_dir=tmp_path)
    assert [str(line) for line in lines] == [
        "✗ doctor: the checks themselves failed: KeyError: 'hosts'"]
    said = capsys.readouterr().out
    assert said.splitlines()[-1].startswith("splitbench doctor: 1 problem(s) above")
    assert (tmp_path / "doctor.txt").read_text() == said


class NotRoot:
    """A host B whose login user, bench, is not root (the SSH lab pair logs in as root;
    tests/workflow/test_another_machine.py asks a real B): `sudo` says whether sudo -n
    runs ip, nft and tee themselves (None: no sudo at all), `helper` whether it runs
    the root helper, and which version that says ("ready": this one's)."""

    name = "b"
    remote = False

    def __init__(self, sudo: bool | None, helper: str | None = None) -> None:
        self.sudo, self.helper = sudo, helper

    def is_root(self) -> bool:
        return False

    def run(self, argv, check=True, **_):
        def done(code: int, out: str = "") -> subprocess.CompletedProcess:
            return subprocess.CompletedProcess(argv, code, out, "")

        if argv == ["id", "-un"]:
            return done(0, "bench\n")
        if argv[0] == "sh":  # privilege.tool_path: where a tool is
            tool = argv[-2]
            if tool == "sudo" and self.sudo is None:
                return done(1)
            return done(0, {"ip": "/usr/bin/ip"}.get(tool, f"/usr/sbin/{tool}") + "\n")
        if argv == ["sudo", "-n", "-l", privilege.HELPER]:
            return done(0 if self.helper else 1)
        if argv == ["sudo", "-n", privilege.HELPER, "version"]:
            return done(0, privilege.helper_version() if self.helper == "ready" else "0" * 64)
        if argv[:3] == ["sudo", "-n", "-l"]:
            return done(0 if self.sudo else 1)
        raise AssertionError(f"unexpected command {argv}")


INSTALL = (f"as root there: install -o root -g root -m 0755 {root_helper.__file__} "
           f"{privilege.HELPER}, then visudo -f /etc/sudoers.d/splitbench: bench ALL=(root) "
           f"NOPASSWD: {privilege.HELPER}")


def test_a_link_host_b_may_not_address_is_its_own_line_with_the_helper_to_install():
    said = ssh_kind.rights(NotRoot(sudo=False), "rig", ["veth"], guarded=True)
    assert str(said) == (
        f"✗ rig: not root on host B, and sudo -n runs neither {privilege.HELPER} nor ip or "
        "nft for bench, which addresses for links veth and the firewall guard need — "
        f"{INSTALL} — or set adopt: true on links veth and firewall: own on the pair "
        "(docs/two-machines.md)")
    # Holding the wake-up latency is the helper's too: the same line, one more refusal.
    said = ssh_kind.rights(NotRoot(sudo=False), "rig", ["veth"], guarded=True, wakeup=True)
    assert str(said).startswith(
        f"✗ rig: not root on host B, and sudo -n runs neither {privilege.HELPER} nor ip, nft "
        "or tee /dev/cpu_dma_latency for bench, which addresses for links veth, the "
        "firewall guard and holding the CPUs' wake-up latency need"), said
    assert (f"NOPASSWD: {privilege.HELPER} — or set adopt: true on links veth, firewall: "
            "own on the pair and hold_wakeup_latency: false (top level)") in str(said), said
    # Only what is needed: every link adopted already is not told to adopt (a new user's
    # walk read "set adopt: true on those links" with every link adopted).
    said = ssh_kind.rights(NotRoot(sudo=False), "rig", [], guarded=True)
    assert "nor nft for bench" in str(said)
    assert "adopt" not in str(said) and "or set firewall: own on the pair (" in str(said)
    # No sudo at all: installing it comes first.
    said = ssh_kind.rights(NotRoot(sudo=None), "rig", ["veth"], guarded=False)
    assert "install sudo there (Debian: apt-get install sudo), then as root there" in str(said)
    # The helper installed and allowed: ready, and it says through what.
    said = ssh_kind.rights(NotRoot(sudo=False, helper="ready"), "rig", ["veth"], guarded=True)
    assert str(said) == (f"✓ rig: host B: addresses for links veth and the firewall guard "
                         f"through {privilege.HELPER} (fixed verbs, through sudo -n for "
                         "bench; no root login); everything else runs as bench")
    # Another version of it: reinstall.
    said = ssh_kind.rights(NotRoot(sudo=False, helper="old"), "rig", ["veth"], guarded=True)
    assert str(said) == (f"✗ rig: host B: {privilege.HELPER} is not this splitbench's "
                         f"(another version) — install this one: {INSTALL}")
    # An older line that lets sudo run ip and nft themselves: it works, and the doctor
    # calls it what it is.
    said = ssh_kind.rights(NotRoot(sudo=True), "rig", ["veth"], guarded=True)
    assert str(said) == ("✓ rig: host B: ip, nft as root through sudo -n for bench; "
                         "root-equivalent: sudo runs ip and nft with any arguments for bench "
                         f"(ip netns exec opens a root shell) — narrow it to the helper: "
                         f"{INSTALL}")
    # Every link adopted and the firewall the user's own: nothing needs root.
    assert ssh_kind.rights(NotRoot(sudo=False), "rig", [], guarded=False).mark == doctor.OK
