"""What `snakemake all` does first (doctor.before_run): the doctor's lines, printed and
kept in results/doctor.txt; on a cluster only the run's own; the doctor's own fault a ✗
line, never the run's end. The real run's doctor is held by the workflow tests (a ready
tiny pair; an SSH pair that cannot be reached)."""

from __future__ import annotations

import subprocess

from splitbench import doctor
from splitbench.configuration import parsed
from splitbench.pairs import ssh as ssh_kind
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
    tests/workflow/test_another_machine.py asks a real B): its sudo as given, None for a
    host without sudo."""

    name = "b"

    def __init__(self, sudo: bool | None) -> None:
        self.sudo = sudo

    def is_root(self) -> bool:
        return False

    def run(self, argv, check=True, **_):
        def done(code: int, out: str = "") -> subprocess.CompletedProcess:
            return subprocess.CompletedProcess(argv, code, out, "")

        if argv == ["id", "-un"]:
            return done(0, "bench\n")
        if argv[0] == "sh":  # privilege.tool_path: where a tool is
            tool = argv[-1]
            if tool == "sudo" and self.sudo is None:
                return done(1)
            return done(0, {"ip": "/usr/bin/ip"}.get(tool, f"/usr/sbin/{tool}") + "\n")
        if argv[:3] == ["sudo", "-n", "-l"]:
            return done(0 if self.sudo else 1)
        raise AssertionError(f"unexpected command {argv}")


def test_a_link_host_b_may_not_address_is_its_own_line_with_the_sudoers_line():
    said = ssh_kind.rights(NotRoot(sudo=False), "rig", ["veth"], guarded=True)
    assert str(said) == (
        "✗ rig: not root on host B, and sudo -n does not run ip or nft for bench, which "
        "addresses for links veth and the firewall guard need — allow it there (visudo -f "
        "/etc/sudoers.d/splitbench): bench ALL=(root) NOPASSWD: /usr/bin/ip, /usr/sbin/nft "
        "— or set adopt: true on links veth and firewall: own on the pair "
        "(docs/two-machines.md)")
    # Holding the wake-up latency adds tee of that one file, and nothing more.
    said = ssh_kind.rights(NotRoot(sudo=False), "rig", ["veth"], guarded=True, wakeup=True)
    assert str(said).startswith(
        "✗ rig: not root on host B, and sudo -n does not run ip, nft or tee "
        "/dev/cpu_dma_latency for bench, which addresses for links veth, the firewall guard "
        "and holding the CPUs' wake-up latency need"), said
    assert ("NOPASSWD: /usr/bin/ip, /usr/sbin/nft, /usr/sbin/tee /dev/cpu_dma_latency — or "
            "set adopt: true on links veth, firewall: own on the pair and "
            "hold_wakeup_latency: false (top level)") in str(said), said
    # Only what is needed: the guard alone asks for nft alone, and every link adopted
    # already is not told to adopt (a new user's walk read "set adopt: true on those
    # links" with every link adopted).
    said = ssh_kind.rights(NotRoot(sudo=False), "rig", [], guarded=True)
    assert "does not run nft for bench" in str(said)
    assert str(said).count("NOPASSWD: /usr/sbin/nft —") == 1
    assert "adopt" not in str(said) and "or set firewall: own on the pair (" in str(said)
    # No sudo at all: installing it comes first.
    said = ssh_kind.rights(NotRoot(sudo=None), "rig", ["veth"], guarded=False)
    assert "install sudo there (Debian: apt-get install sudo), then allow it" in str(said)
    # sudo -n allows them: ready, and it says so.
    said = ssh_kind.rights(NotRoot(sudo=True), "rig", ["veth"], guarded=True)
    assert str(said) == ("✓ rig: host B: ip, nft as root through sudo -n for bench (no root "
                         "login); everything else runs as bench")
    # Every link adopted and the firewall the user's own: nothing needs root.
    assert ssh_kind.rights(NotRoot(sudo=False), "rig", [], guarded=False).mark == doctor.OK
