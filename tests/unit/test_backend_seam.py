"""llama.cpp is one backend among others: outside `splitbench/backends/`, no code (its
comments and docstrings aside) names it or its model format, but for the few places
listed here, each with why."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from tests.conftest import ROOT

NAMES = re.compile(r"llamacpp|llama_cpp|gguf")
# file: the tokens that may name llama.cpp there, and why.
ALLOWED = {
    # The registry's default: the backend of a model that names none, and its format.
    "splitbench/contracts/registry.py": {'"llamacpp"', '"gguf"'},
    # The model stage's flag and output name: a rule's command text is Snakemake's rerun
    # trigger, and another name would re-make every model of a finished run.
    "rules/models.smk": {'"--gguf {output:q}"', "gguf", '"--gguf {output.gguf:q}"',
                         '"--gguf {input:q}"'},
    "splitbench/commands/model.py": {'"--gguf"'},
    # The model record's key for a GGUF's header, as every run so far wrote it.
    "splitbench/contracts/records.py": {"gguf"},
}


def code_tokens(text: str) -> list[tuple[int, str]]:
    """(line, token) of every token that is code: comments and docstrings (a string
    that is a statement of its own) left out."""
    found, start_of_statement = [], True
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL):
            continue
        if token.type == tokenize.STRING and start_of_statement:
            continue
        start_of_statement = token.type in (tokenize.NEWLINE, tokenize.INDENT,
                                            tokenize.DEDENT)
        found.append((token.start[0], token.string))
    return found


def naming_llama_cpp(root: Path = ROOT) -> list[str]:
    paths = [*(root / "splitbench").rglob("*.py"), *(root / "rules").glob("*.smk"),
             root / "Snakefile"]
    out = []
    for path in sorted(paths):
        where = str(path.relative_to(root))
        if where.startswith("splitbench/backends/"):
            continue
        allowed = ALLOWED.get(where, set())
        out += [f"{where}:{line}: {text}" for line, text in code_tokens(path.read_text())
                if NAMES.search(text) and text not in allowed]
    return out


def test_only_the_backends_name_llama_cpp():
    assert naming_llama_cpp() == []


def test_the_check_sees_code_and_not_its_comments_or_docstrings(tmp_path):
    (tmp_path / "splitbench/compare").mkdir(parents=True)
    (tmp_path / "rules").mkdir()
    (tmp_path / "Snakefile").write_text("")
    (tmp_path / "splitbench/compare/x.py").write_text(
        '"""The llamacpp backend\'s figures."""\n\n# gguf: a comment\n'
        'def f():\n    """llama_cpp in a docstring."""\n    return "llamacpp"\n')
    assert naming_llama_cpp(tmp_path) == ['splitbench/compare/x.py:6: "llamacpp"']
