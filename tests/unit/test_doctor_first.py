"""What `snakemake all` does first (doctor.before_run): the doctor's lines, printed and
kept in results/doctor.txt; on a cluster only the run's own; the doctor's own fault a ✗
line, never the run's end. The real run's doctor is held by the workflow tests (a ready
tiny pair; an SSH pair that cannot be reached)."""

from __future__ import annotations

from splitbench import doctor
from splitbench.configuration import parsed
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
    """A host whose user is not root (the SSH lab pair logs in as root)."""
    name = "b"

    def is_root(self) -> bool:
        return False


def test_a_link_host_b_may_not_address_is_its_own_line_with_the_fix():
    said = doctor._rights(NotRoot(), "rig", ["veth"], guarded=True)
    assert str(said) == (
        "✗ rig: not root on host B, which addresses for links veth and the firewall guard "
        "need — run as root there, or set adopt: true on those links and firewall: own on "
        "the pair (docs/two-machines.md)")
    # Every link adopted and the firewall the user's own: nothing needs root.
    assert doctor._rights(NotRoot(), "rig", [], guarded=False).mark == doctor.OK
