"""The command line: each command is a module of its own name, the rules call only
declared commands, and a command imports only its own module."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from splitbench import cli, commands
from splitbench.contracts import registry
from tests.conftest import ROOT

# splitbench("link", ...) through the rules' helper, or a literal command (checks, whose
# output is also printed).
RULE_STAGES = {
    m for path in (ROOT / "rules").glob("*.smk")
    for m in re.findall(r'splitbench\(\s*"([a-z-]+)"|"python -m splitbench ([a-z-]+) ',
                        path.read_text())
    for m in m if m
}


@pytest.mark.parametrize("name", commands.NAMES)
def test_every_command_is_a_module_of_its_name(name):
    command = commands.load(name)
    assert command.__name__ == f"splitbench.commands.{name.replace('-', '_')}"
    assert command.HELP and command.__doc__
    assert callable(command.arguments) and callable(command.run)


def test_every_module_in_the_commands_folder_is_a_listed_command():
    folder = ROOT / "splitbench/commands"
    modules = {p.stem.replace("_", "-") for p in folder.glob("*.py") if p.stem != "__init__"}
    assert modules == set(commands.NAMES)


def test_the_rules_call_every_declared_stage_and_nothing_else():
    assert RULE_STAGES, "no stage found in rules/*.smk: the pattern above is out of date"
    assert set(commands.BY_A_RULE) == RULE_STAGES
    assert set(commands.NAMES) == set(commands.BY_A_RULE) | set(commands.BY_A_PERSON)


def test_help_lists_a_persons_commands_and_names_the_rules_apart():
    text = cli.parser(list(commands.NAMES)).format_help()
    listed = re.findall(r"^    ([a-z-]+)(?: {2,}|$)", text, re.M)
    assert listed == list(commands.BY_A_PERSON), text
    rules_line = " ".join(text.split("Run by the workflow's rules")[1].split())
    assert all(f" {name}," in rules_line or f" {name}." in rules_line
               for name in commands.BY_A_RULE), rules_line


def rule_commands() -> list[tuple[str, set[str]]]:
    """Each rule's command in rules/*.smk: its stage and the flags it passes."""
    found = []
    for path in (ROOT / "rules").glob("*.smk"):
        text = path.read_text()
        for call in re.finditer(r'splitbench\(\s*"([a-z-]+)"(.*?)\n\s*\)', text, re.S):
            found.append((call.group(1), set(re.findall(r"(--[a-z-]+)", call.group(2)))))
        for line in re.finditer(r'"python -m splitbench ([a-z-]+) ([^"]*)"', text):
            found.append((line.group(1), set(re.findall(r"(--[a-z-]+)", line.group(2)))))
    return found


def test_each_rule_passes_exactly_the_flags_its_stage_declares():
    """The flags are declared once, by the stage's parser: a rule that passes one it does
    not declare, or leaves out one it requires, fails here (not at its first job)."""
    calls = rule_commands()
    assert {stage for stage, _ in calls} == RULE_STAGES
    for stage, flags in calls:
        parser = cli.parser([stage])._subparsers._group_actions[0].choices[stage]
        options = {o: a for a in parser._actions for o in a.option_strings}
        required = {a.option_strings[0] for a in parser._actions if a.required}
        assert flags <= set(options), (stage, flags - set(options))
        assert required <= flags, (stage, required - flags)


def test_an_unknown_stage_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["nosuch"])
    assert stop.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_a_missing_argument_is_named(capsys):
    with pytest.raises(SystemExit):
        cli.main(["link", "--spec", "{}"])
    assert "--settings" in capsys.readouterr().err


def test_cells_lists_the_matching_cell_files(capsys):
    assert cli.main(["cells", "--config", str(ROOT / "config/config.yaml"),
                     "--match", "link=usb4,ctx=short,conc=2"]) == 0
    assert capsys.readouterr().out.split() == ["results/cells/lab/usb4/synth/ctxshort_c2.parquet"]


def test_a_command_imports_only_its_own_stage(tmp_path):
    """teardown must not pay for pandas' or the chart libraries' import."""
    code = ("import sys; from splitbench import cli; cli.main(['teardown']); "
            "print(sorted(m for m in ('pandas', 'altair', 'httpx') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "SPLITBENCH_STATE": str(tmp_path / "state")},
                          timeout=60, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"



def test_the_jobs_that_drive_a_pair_do_not_pay_for_the_config_model():
    """A cell's job starts once per cell: the typed config (pydantic) is planning's, and
    so is every backend's section (a cell's job loads its backend)."""
    code = ("import importlib, sys\n"
            "from splitbench import backends\nfrom splitbench.contracts import registry\n"
            f"for name in {list(commands.DRIVING)!r}:\n"
            "    importlib.import_module('splitbench.commands.' + name.replace('-', '_'))\n"
            "for name in registry.names():\n"
            "    backends.get(name)\n"
            "print(sorted(m for m in ('pydantic', 'splitbench.configuration') "
            "if m in sys.modules))")
    env = {**os.environ, registry.VARIABLE: str(ROOT / "tests/backends/onetrip")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=True, env=env)
    assert done.stdout.strip().splitlines()[-1] == "[]"

def test_a_problem_splitbench_names_is_an_error_line_and_status_2(capsys):
    """No traceback: the message names the problem (here an unknown field of --match)."""
    status = cli.main(["cells", "--config", str(ROOT / "config/config.yaml"),
                       "--match", "colour=red"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config key '--match': unknown field(s) ['colour']")
    assert "Traceback" not in err


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`splitbench cells | head -1`: the reader closes before the list is written."""
    child = subprocess.Popen([sys.executable, "-m", "splitbench", "cells", "--config",
                              str(ROOT / "config/config.yaml")], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # gone before the first line
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 141, err
    assert err == ""


def test_every_error_splitbench_raises_shares_one_base():
    from splitbench import configuration
    from splitbench.backends.llamacpp import servers as llamacpp_servers
    from splitbench.backends.vllm import servers as vllm_servers
    from splitbench.errors import SplitbenchError
    from splitbench.infra import hosts, ssh
    from splitbench.links import guard, real, verify

    assert llamacpp_servers.LaunchError is vllm_servers.LaunchError  # one, shared
    for error in (llamacpp_servers.LaunchError, hosts.HostError, ssh.SSHError,
                  guard.GuardError, real.SetupError, verify.LinkError,
                  configuration.ConfigError):
        assert issubclass(error, SplitbenchError), error


