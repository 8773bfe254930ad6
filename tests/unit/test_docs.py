"""The docs guide: the README is short and links what it leaves out, the contributor's
guide holds no timing log, and every file of the repository the docs name exists."""

from __future__ import annotations

import re

from tests.conftest import ROOT

# Where the docs name files of the repository: the READMEs, docs/, the changelog and the
# comments of pyproject.toml.
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml",
        ROOT / "benchmarks/README.md", ROOT / "config/README.md",
        *sorted((ROOT / "docs").glob("*.md"))]
# A path in the repository, as the docs write one (not one inside another path).
REPO_PATH = re.compile(r"(?<![\w/.~-])((?:splitbench|tests|benchmarks|config|docs|rules|"
                       r"profiles|envs)/[\w./-]*\w)")
# Files a run writes, which a fresh clone does not have.
WRITTEN_BY_A_RUN = {"config/reruns.yaml"}


def test_the_readme_is_a_page_of_where_to_start():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for linked in ("docs/default-run.md", "docs/development.md", "docs/architecture.md",
                   "CHANGELOG.md", "docs/two-machines.md"):
        assert f"]({linked}" in readme, linked


def test_the_contributors_guide_keeps_no_timing_log():
    """Per-commit timings go to benchmarks/suite_times.md: no table row or sentence of
    docs/development.md names a commit."""
    guide = (ROOT / "docs/development.md").read_text()
    commits = re.findall(r"(?<![\w/-])[0-9a-f]{7,12}(?![\w/-])", guide)
    assert [c for c in commits if re.search(r"[a-f]", c) and re.search(r"\d", c)] == []


def test_every_file_the_docs_name_exists():
    missing = [f"{doc.relative_to(ROOT)}:{number}: {path}"
               for doc in DOCS
               for number, line in enumerate(doc.read_text().splitlines(), 1)
               for path in REPO_PATH.findall(line)
               if path not in WRITTEN_BY_A_RUN and not (ROOT / path).exists()]
    assert missing == []
