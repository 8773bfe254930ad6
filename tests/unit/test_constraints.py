"""envs/constraints.txt, what ./bootstrap.sh installs the venv with, and pyproject.toml
may not disagree: every dependency (the package's, the dev and slurm extras', llama.cpp's)
is pinned there to a version its specifier admits."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import ROOT

CONSTRAINTS = ROOT / "envs/constraints.txt"


def pins() -> dict[str, Version]:
    found = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, version = line.split("==")  # exact pins only
        assert canonicalize_name(name) not in found, name
        found[canonicalize_name(name)] = Version(version)
    return found


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in (*project["dependencies"], *extras["dev"],
                                     *extras["slurm"], *extras["llama"])]


def mismatches(wanted: list[Requirement], pinned: dict[str, Version]) -> dict[str, str]:
    """pyproject.toml's requirement: the constraints' pin, where that pin is missing or
    outside what the requirement admits."""
    return {str(r): str(pinned.get(canonicalize_name(r.name)))
            for r in wanted
            if canonicalize_name(r.name) not in pinned
            or not r.specifier.contains(pinned[canonicalize_name(r.name)], prereleases=True)}


def test_every_dependency_is_pinned_to_a_version_it_admits():
    assert mismatches(requirements(), pins()) == {}


def test_a_pin_outside_the_range_or_missing_is_caught():
    pinned = pins()
    pinned["pandas"] = Version("2.3.3")  # pyproject asks for pandas 3
    del pinned["pyarrow"]
    assert set(mismatches(requirements(), pinned).items()) == {
        ("pandas<4,>=3.1", "2.3.3"), ("pyarrow>=16", "None")}


def test_llama_cpp_is_pinned_as_bootstrap_builds_it():
    wanted = re.search(r'^LLAMA_PACKAGE="([^"]+)"$', (ROOT / "bootstrap.sh").read_text(),
                       re.M).group(1)
    name, version = wanted.split("==")
    assert pins()[canonicalize_name(name)] == Version(version)


def test_bootstrap_installs_the_venv_with_the_constraints():
    text = (ROOT / "bootstrap.sh").read_text()
    assert re.search(r"pip\" install -q --no-compile -e '\.\[dev\]' -c envs/constraints\.txt",
                     text)
