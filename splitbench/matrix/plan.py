"""The benchmark matrix: which cells exist, where their files live, what each job gets.

Everything here is pure: it reads the typed config (`configuration.Config`, parsed
once from the schema-validated mapping) and returns names, paths and small dicts. The
Snakefile and the rules call these functions so that each job receives only its own
slice of config: the keys the config sets, as written (`Section.given`), with the
defaults the code applies.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import yaml

from splitbench import configuration, pairs
from splitbench.configuration import Config, ConfigError
from splitbench.contracts import registry, results
from splitbench.contracts.slices import (
    CellSlice,
    LinkCheckSettings,
    LinkSlice,
    ModelSlice,
    PairedSlice,
    PairView,
    ServerSettings,
    SweepSettings,
    SweepSlice,
)
from splitbench.infra import precision


@dataclass(frozen=True)
class Cell:
    pair: str
    link: str
    model: str
    ctx: str
    conc: int

    @property
    def path(self) -> str:
        return results.cell(self.pair, self.link, self.model, self.ctx, self.conc)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML config file as a dict ({} when empty)."""
    return yaml.safe_load(Path(path).read_text()) or {}


# Keys whose entries make up the matrix: Snakemake merges a command-line config file
# into the workflow's own, recursively, so the embedded lab would join a user's pair.
MATRIX_KEYS = ("pairs", "models", "contexts")


def entries_merged_in(workflow_config: dict[str, Any], given: list[dict[str, Any]]) -> list[str]:
    """Paths (`pairs.lab`, `pairs.rig.links.usb4`) that the merge brings in from the
    workflow's own config file under a matrix key the given files (those on the command
    line) set, because none of the given files defines them."""
    def added(default: dict, mine: list[dict], path: str) -> list[str]:
        out = []
        for key, value in default.items():
            theirs = [m[key] for m in mine if key in m]
            if not theirs:
                out.append(f"{path}{key}")
            elif isinstance(value, dict):
                out += added(value, [t for t in theirs if isinstance(t, dict)],
                             f"{path}{key}.")
        return out

    found = []
    for key in MATRIX_KEYS:
        mine = [g[key] for g in given if isinstance(g.get(key), dict)]
        if mine and isinstance(workflow_config.get(key), dict):
            found += added(workflow_config[key], mine, f"{key}.")
    return found


def names_as_text(config: dict[str, Any]) -> None:
    """Names are text: YAML reads a context named `512:` or a model named `7:` as a
    number, which then fails to sort against the other names. Turns the names of pairs,
    links, models and contexts, and every reference to one, into strings, in place."""
    def keys(mapping: Any) -> Any:
        return {str(k): v for k, v in mapping.items()} if isinstance(mapping, dict) \
            else mapping

    for section in ("pairs", "models", "contexts"):
        config[section] = keys(config.get(section))
    for spec in (config.get("pairs") or {}).values():
        if isinstance(spec, dict):
            spec["links"] = keys(spec.get("links"))
    if config.get("baseline_link") is not None:
        config["baseline_link"] = str(config["baseline_link"])
    for section, key in (("roundtrips", "models"), ("cell", "paired")):
        value = (config.get(section) or {}).get(key)
        if key == "models" and isinstance(value, list):
            config[section][key] = [str(v) for v in value]
        elif isinstance(value, dict) and isinstance(value.get("contexts"), list):
            value["contexts"] = [str(v) for v in value["contexts"]]


def written(section: configuration.Section | None) -> dict[str, Any]:
    """An optional section's keys as the config writes them ({} where it has none)."""
    return section.given() if section is not None else {}


# The embedded lab's run-to-run calibration (summary/between_runs.py), measured by
# benchmarks/coverage.py --calibrate on A/A runs of the embedded default.
BETWEEN_RUNS = Path(__file__).resolve().parents[2] / "config" / "between_runs.yaml"


def between_runs(config: Config, calibration: Path = BETWEEN_RUNS) -> dict[str, Any]:
    """Per pair, the run-to-run calibration its figures carry: the file's, for the
    embedded pairs (the kind of pair it was measured on); none for a real pair, whose
    figures then carry this run's spread only and say so."""
    if not calibration.exists():
        return {}
    found = yaml.safe_load(calibration.read_text()) or {}
    return {name: found for name, spec in config.pairs.items()
            if spec.mode == found.get("mode")}


def cell_settings(config: Config) -> CellSlice:
    """Every cell's measurement settings (`cell:` with defaults; `paired` is per cell)."""
    given = {k: v for k, v in config.cell.given().items() if k != "paired"}
    return {**configuration.defaults(configuration.CellSpec,
                                     exclude=("paired", "precision")), **given,
            **_wakeup(config)}


class PairedSettings(TypedDict):
    """`cell.paired` with its defaults."""

    rounds: int
    requests: int
    contexts: list[str] | None


def paired_settings(config: Config) -> PairedSettings:
    """`cell.paired` with defaults: rounds 0 (off), requests per link per round, the
    contexts it applies to (None: every context)."""
    paired = config.cell.paired
    return {**configuration.defaults(configuration.Paired),
            **(paired.given() if paired else {})}


def paired_for(config: Config, cell: Cell) -> PairedSlice | None:
    """What a single-stream cell on a link other than the baseline needs to measure
    itself round by round against the baseline link: rounds, requests per round, and
    the baseline's link slice. None where pairing does not apply to the cell."""
    settings = paired_settings(config)
    contexts = settings["contexts"]
    if (not settings["rounds"] or cell.conc != 1 or cell.link == config.baseline_link
            or (contexts is not None and cell.ctx not in contexts)):
        return None
    return {"rounds": settings["rounds"], "requests": settings["requests"],
            "reference": link_slice(config, cell.pair, config.baseline_link)}


def _wakeup(config: Config) -> dict[str, bool]:
    """Whether measurements hold the CPUs' wake-up latency at 0 (splitbench/cells/wakeup.py):
    part of every measuring job's settings, so that changing it re-measures."""
    return {"hold_wakeup_latency": config.hold_wakeup_latency}


def link_check_settings(config: Config) -> LinkCheckSettings:
    # `sockperf` and `iperf_spread_rel` are in a link's settings only where the config
    # sets them: links verified before the keys existed keep the settings they were made
    # with (and plan nothing).
    given = config.link_check.given()
    if given.get("iperf_spread_rel", 0) is None:  # null: no rule, as without the key
        del given["iperf_spread_rel"]
    return {**configuration.defaults(configuration.LinkCheck,
                                     exclude=("sockperf", "iperf_spread_rel")),
            **given, **_wakeup(config)}


def cells(config: Config, rotation: int = 0) -> list[Cell]:
    """Every cell, in the order they should run: one (pair, link, model) block at a time,
    a model's blocks one after another (so its drift anchors bracket them), the baseline
    link's block first wherever the config lists it: the start anchor runs on the
    baseline's launch, which its block's cells then use as it is. The other links follow
    in config order turned by `rotation` (link_order)."""
    out = []
    for pair, spec in config.pairs.items():
        links = link_order(config, list(spec.links), rotation)
        for model in config.models:
            for link in links:
                for ctx in config.contexts:
                    for conc in sorted(config.concurrency):
                        out.append(Cell(pair, link, model, ctx, conc))
    return out


def matching_cells(config: Config, match: str) -> list[Cell]:
    """Cells whose fields equal every `key=value` of a comma-separated pattern."""
    wanted = dict(item.split("=", 1) for item in match.split(",") if item)
    unknown = set(wanted) - {"pair", "link", "model", "ctx", "conc"}
    if unknown:
        raise ConfigError("--match", f"unknown field(s) {sorted(unknown)}: use pair, link, "
                          "model, ctx, conc")
    return [c for c in cells(config)
            if all(str(getattr(c, key)) == value for key, value in wanted.items())]


def blocks(config: Config, rotation: int = 0) -> list[tuple[str, str, str]]:
    """The (pair, link, model) blocks, each served by one server launch, in run order."""
    seen: dict[tuple[str, str, str], None] = {}
    for c in cells(config, rotation):
        seen[(c.pair, c.link, c.model)] = None
    return list(seen)


def link_order(config: Config, links: list[str], rotation: int = 0) -> list[str]:
    """A pair's links in run order: the baseline first (where the pair has it), the others
    in config order turned left by `rotation`. Each run turns them by a rotation of its
    own (chosen_rotation), so that no link is always measured last, after the machine
    has warmed for longest: an unpaired comparison's time order differs between runs
    and its run-to-run term measures that too."""
    first = [link for link in links if link == config.baseline_link]
    others = [link for link in links if link != config.baseline_link]
    if others:
        turn = rotation % len(others)
        others = others[turn:] + others[:turn]
    return first + others


def chosen_rotation(order_file: str | Path) -> int:
    """This run's rotation of the link order: the one `order_file` records (a run that
    resumes keeps its order), else a new random one (record_order writes it when the
    run starts)."""
    path = Path(order_file)
    if path.exists():
        try:
            return int(json.loads(path.read_text())["rotation"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(str(path), f"unreadable block order ({exc}): delete the "
                              "file and the run chooses a new one") from exc
    return secrets.randbelow(ROTATIONS)


def record_order(order_file: str | Path, rotation: int,
                 order: list[tuple[str, str, str]]) -> None:
    """The run's block order and its rotation, written once: the run that resumes reads
    its rotation back (chosen_rotation), the report's reader sees which link went when."""
    path = Path(order_file)
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rotation": rotation,
                                "blocks": ["/".join(block) for block in order]}, indent=1))


# A rotation is taken modulo each pair's count of non-baseline links: any count up to 12
# gets each of its turns about equally often.
ROTATIONS = 27720


# Priorities one block apart: room for a model's start anchor (+2) and baseline launch
# (+3) above its first block, and its end anchor (-1) below its last, every one of them
# strictly between the blocks around it. (With 4, the next model's baseline launch tied
# the end anchor; Snakemake could run the launch first, and both anchors then relaunched
# the server the other had replaced: two launches more per model.)
BLOCK_STEP = 5


def block_priority(config: Config, pair: str, link: str, model: str,
                   order: list[tuple[str, str, str]] | None = None) -> int:
    """Higher for earlier blocks, so one block's cells run back to back on one launch
    (BLOCK_STEP). `order` is blocks(config), computed once by the caller that asks for
    every job."""
    order = order or blocks(config)
    return BLOCK_STEP * (len(order) - order.index((pair, link, model)))


def anchor_priority(config: Config, pair: str, model: str, when: str,
                    order: list[tuple[str, str, str]] | None = None) -> int:
    order = order or blocks(config)
    mine = [block for block in order if (block[0], block[2]) == (pair, model)]
    if when == "start":
        return block_priority(config, *mine[0], order=order) + 2
    return block_priority(config, *mine[-1], order=order) - 1


def launch_priority(config: Config, pair: str, link: str, model: str,
                    order: list[tuple[str, str, str]] | None = None) -> int:
    """A block's priority; the baseline launch outranks its model's start anchor, which
    needs it (Snakemake does not pass a job's priority on to the jobs it waits for)."""
    if link == config.baseline_link:
        return anchor_priority(config, pair, model, "start", order) + 1
    return block_priority(config, pair, link, model, order)


def setup_priority(order: list[tuple[str, str, str]]) -> int:
    """Above every block, anchor and launch: links, toolchains and models are all ready
    before any launch. Left at 0, a block's launch outranks a link check that an earlier
    block needs, and that later block's cells then run before the model's start anchor."""
    return BLOCK_STEP * (len(order) + 1)


def anchor_cell(config: Config, pair: str, model: str) -> Cell:
    """The drift anchor: a short single-stream cell on the baseline link."""
    shortest = min(config.contexts, key=config.contexts.__getitem__)
    return Cell(pair, config.baseline_link, model, shortest, 1)


def anchor_slice(config: Config, pair: str, model: str) -> CellSlice:
    """The drift anchor's measurement: its cell's, without precision targets. The
    anchors' difference is the machine's drift, whose ± every sequential comparison
    carries: they always send their full count, as the cells they bracket did before
    any target stopped them."""
    out = cell_slice(config, anchor_cell(config, pair, model))
    out.pop("precision", None)
    out.pop("interference", None)
    return out


def model_slice(config: Config, model: str) -> ModelSlice:
    spec = config.models[model].given()
    spec.setdefault("threads", 1)
    return spec


def server_slice(config: Config, model: str) -> ServerSettings:
    """What the server launch of one model needs: sized for all of that model's cells.

    Policy ("dynamic ctx", as in the seed): one slot per request of the largest
    concurrency level, each slot holding the longest prompt plus n_predict plus a
    small margin, rounded up to 256 tokens (llama.cpp's slot granularity).
    """
    spec = model_slice(config, model)
    n_predict = cell_settings(config)["n_predict"]
    slots = max(config.concurrency)
    tokens = max(config.contexts.values()) + n_predict
    from splitbench import backends  # each backend plans its own launch

    return backends.get(spec.get("backend", registry.DEFAULT)).server_settings(
        spec, slots, tokens)


def link_slice(config: Config, pair: str, link: str) -> LinkSlice:
    """The link's emulation spec plus its position (which sets its addresses)."""
    pair_spec = config.pairs[pair]
    spec = pair_spec.links[link].given()
    kind = pairs.of(pair_spec.mode)
    return {"pair": pair, "link": link, "mode": kind.name, **spec,
            **kind.link_keys(pair_spec, link, spec)}


def precision_for(config: Config, cell: Cell, paired: bool) -> dict[str, float]:
    """The `cell.precision` targets one cell reads: a single stream's decode and
    prefill, a paired one's decode difference (its rounds stop on that alone), a
    concurrent cell's decode and throughput."""
    given = config.cell.precision.given() if config.cell.precision else {}
    kinds = (precision.CONCURRENT_TARGETS if cell.conc > 1
             else precision.PAIRED_TARGETS if paired else precision.SINGLE_STREAM_TARGETS)
    return precision.targets_for(given, kinds)


# The `cell:` keys only one kind of cell reads (cells.stopping.more_shots).
SINGLE_STREAM_KEYS = ("single_stream_requests", "single_stream_seconds")
CONCURRENT_KEYS = ("concurrent_releases", "concurrent_seconds")


def cell_slice(config: Config, cell: Cell, epoch: int = 0) -> CellSlice:
    """Exactly what one cell's measurement depends on (its rerun trigger). A new epoch
    (config/reruns.yaml) re-measures just this cell."""
    # A single stream reads only its request count, a concurrent cell only its releases':
    # tuning one kind re-measures none of the other.
    unused = CONCURRENT_KEYS if cell.conc == 1 else SINGLE_STREAM_KEYS
    out = {
        "measurement_version": config.measurement_version,
        "prompt_tokens": config.contexts[cell.ctx],
        "concurrency": cell.conc,
        **{k: v for k, v in cell_settings(config).items()
           if k not in unused and k != "precision"},
        "model": model_slice(config, cell.model),
    }
    # Only when set, so that existing cells keep their params (and are not re-measured).
    if config.repeats > 1:
        out["repeats"] = config.repeats
    paired = paired_for(config, cell)
    if paired:
        out["paired"] = paired
    # Only the targets this kind of cell reads, and only where set (infra/precision.py).
    targets = precision_for(config, cell, paired is not None)
    if targets:
        out["precision"] = targets
        # The rule stops early only while the machines read quiet by these limits
        # (cells.measure.quiet): the cell reads them only when the config sets them.
        limits = config.interference.given() if config.interference else None
        if limits:
            out["interference"] = limits
    if epoch:
        out["epoch"] = epoch
    return out


def _roundtrip_defaults() -> SweepSettings:
    return configuration.defaults(configuration.Roundtrips, exclude=("models",))


def roundtrip_settings(config: Config) -> SweepSettings | None:
    """The round-trips sweep's settings, or None when config has no `roundtrips`."""
    if config.roundtrips is None:
        return None
    settings = {**_roundtrip_defaults(), **config.roundtrips.given(), **_wakeup(config)}
    settings.setdefault("models", configuration.swept_models(config))
    return settings


def roundtrip_sweeps(config: Config) -> list[tuple[str, str, int]]:
    """(pair, model, workers) of every sweep, on every pair: an embedded one emulates
    each delay on a link of its own, a real one puts it on its baseline link through a
    relay on host A."""
    settings = roundtrip_settings(config)
    if settings is None:
        return []
    return [(pair, model, workers) for pair in config.pairs
            for model in settings["models"] for workers in settings["workers"]]


def roundtrips_slice(config: Config, pair: str, model: str,
                     workers: int) -> SweepSlice:
    """One sweep's settings, with its own server settings (one slot, short context)."""
    settings = roundtrip_settings(config) or _roundtrip_defaults()
    sweep = {k: v for k, v in settings.items() if k not in ("models", "workers")}
    from splitbench import backends  # the model's: one whose round trips the sweep counts

    server = backends.get(config.models[model].backend).server_settings(
        {**model_slice(config, model), "workers": workers}, 1,
        sweep["prompt_tokens"] + sweep["n_predict"])
    out: SweepSlice = {"pair": pair, "model": model, "workers": workers, **sweep,
                       "server": server}
    if pairs.of(config.pairs[pair].mode).sweep_on_baseline_link:
        out["link"] = link_slice(config, pair, config.baseline_link)
    return out


# --- re-measurement epochs (python -m splitbench drift --apply) ------------------------
def cell_key(pair: str, link: str, model: str, ctx: str, conc: int | str) -> str:
    """A cell's name in config/reruns.yaml (its path under results/cells, no suffix)."""
    return f"{pair}/{link}/{model}/ctx{ctx}_c{int(conc)}"


def epochs(reruns_path: str | Path) -> dict[str, int]:
    """Each cell's re-run epoch from config/reruns.yaml; {} when there is no file."""
    data = read_reruns(reruns_path)
    return {str(k): int(v) for k, v in (data.get("cells") or {}).items()}


def read_reruns(reruns_path: str | Path) -> dict[str, Any]:
    """config/reruns.yaml ({} when there is none): cell -> re-measurement epoch."""
    path = Path(reruns_path)
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not isinstance(data.get("cells") or {}, dict):
        raise ValueError(f"{path}: expected a mapping with 'cells: {{<cell>: <epoch>}}'")
    return data


# --- the report's view of the pairs ------------------------------------------------
HOST_KEYS = ("ssh", "ssh_port", "node", "feature")


def pairs_slice(pairs: dict[str, configuration.Pair]) -> dict[str, PairView]:
    """What the report shows of `pairs:` (the report rule's --pairs): each pair's mode,
    where its hosts are (ssh destination and port, a SLURM `node` or `feature` where
    set) and its links, in config order. Nothing else, so that the rest of a pair's
    config (keys, paths, link rates) does not re-run the report."""
    out = {}
    for pair, spec in pairs.items():
        hosts = spec.hosts.given()
        out[pair] = {
            "mode": spec.mode,
            "hosts": {side: {k: v for k, v in (hosts.get(side) or {}).items()
                             if k in HOST_KEYS and v not in (None, "")}
                      for side in ("a", "b")},
            "links": list(spec.links),
        }
    return out
