"""Every module of the package has a layer and looks only down or across its own layer;
and no modules import each other in a circle, inside a package or across packages.

The layers, bottom up: the words every stage shares (errors, the package's version, the
contracts: slice and record types, the results' paths, the backend registry); the
config's model; what runs on host B; the infrastructure; links; backends (with their
model files);
the matrix and the estimate made from it; cells; the stages that read the cells, each
a package writing one output the next reads (the summary; the run's health; the
comparisons; the findings; the report); what the rules
bind (workflow, with the doctor and the cluster profile); what the rules run (commands,
the command line)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

# Each unit is a package of splitbench or one of its top-level modules.
LAYERS = (
    ("errors", "version", "contracts"),
    ("configuration",),
    ("remote",),
    ("infra",),
    ("links", "pairs"),
    ("backends",),
    ("matrix",),
    ("cells",),
    ("summary",),
    ("health",),
    ("compare",),
    ("findings",),
    ("report",),
    ("workflow",),
    ("commands", "cli", "__main__"),
)
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module by its dotted name (a package by its own)."""
    found = {}
    for path in (root / "splitbench").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Which modules of the package each module imports, at its top or inside a
    function (a lazy import is a dependency too)."""
    known = modules(root)

    def module_of(name: str) -> str:  # `from a.b import c`: c is a module, or a name in a.b
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets |= {module_of(f"{node.module}.{alias.name}") for alias in node.names
                            if node.module.split(".")[0] == "splitbench"}
            elif isinstance(node, ast.Import):
                targets |= {module_of(alias.name) for alias in node.names
                            if alias.name.split(".")[0] == "splitbench"}
        graph[name] = targets - {name, "splitbench"}
    return graph


def unit(module: str) -> str:
    return module.split(".")[1]


def unplaced(root: Path = ROOT) -> set[str]:
    return {unit(m) for m in modules(root) if m != "splitbench"} - set(RANK)


def upward_imports(root: Path = ROOT) -> set[tuple[str, str]]:
    return {(module, target) for module, targets in imports(root).items()
            if module != "splitbench" for target in targets
            if RANK.get(unit(target), -1) > RANK.get(unit(module), len(LAYERS))}


def circles(root: Path = ROOT) -> list[list[str]]:
    """The modules that import each other in a circle, each circle once (Tarjan's
    strongly connected components of more than one module)."""
    graph = imports(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer():
    assert unplaced() == set()


def test_every_module_but_the_command_line_errors_and_version_is_in_a_package():
    top = {path.stem for path in (ROOT / "splitbench").glob("*.py")}
    assert top == {"__init__", "__main__", "cli", "errors", "version"}


def test_no_module_imports_one_above_its_layer():
    assert upward_imports() == set()


def test_no_modules_import_each_other_in_a_circle():
    assert circles() == []


def write(root: Path, module: str, text: str) -> None:
    path = root / Path(*module.split("."))
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.parents:  # each folder a package
        if parent == root:
            break
        (parent / "__init__.py").touch()
    path.with_suffix(".py").write_text(text)


def test_the_checks_see_an_upward_import_a_circle_and_an_unplaced_module(tmp_path):
    """The walk itself: a stage importing the report (the circle there was), two modules
    of one package importing each other (one lazily), a module with no layer."""
    write(tmp_path, "splitbench.compare.x", "from splitbench.report import tables\n")
    write(tmp_path, "splitbench.report.tables", "")
    write(tmp_path, "splitbench.configuration.checks",
          "from splitbench.configuration.sections import Config\n")
    write(tmp_path, "splitbench.configuration.sections",
          "def f():\n    from splitbench.configuration.checks import check\n")
    write(tmp_path, "splitbench.newcomer", "")
    assert upward_imports(tmp_path) == {("splitbench.compare.x", "splitbench.report.tables")}
    assert circles(tmp_path) == [["splitbench.configuration.checks",
                                  "splitbench.configuration.sections"]]
    assert unplaced(tmp_path) == {"newcomer"}
