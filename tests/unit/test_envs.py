"""The rules' conda environment may not drift from the package's own dependencies."""

from __future__ import annotations

import tomllib

import yaml

from tests.conftest import ROOT

# Snakemake runs the jobs; it is not a job's dependency.
NOT_IN_JOBS = {"snakemake"}


def _name(requirement: str) -> str:
    return requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower()


def test_the_conda_environment_lists_exactly_the_packages_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((ROOT / "envs/splitbench.yaml").read_text())["dependencies"]
    pip = next(d["pip"] for d in env if isinstance(d, dict))
    wanted = sorted(r for r in project if _name(r) not in NOT_IN_JOBS)
    assert sorted(pip) == wanted
