"""Each command holds the slices it is given to their types (splitbench/contracts/slices.py) on
entry: a key the type does not name, a required key missing or a value of another type
ends it with an error naming the flag and the key, before anything starts. Every slice
the planner makes from each shipped config holds to its type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from splitbench import cli
from splitbench.configuration import parsed
from splitbench.contracts import slices
from splitbench.contracts.slice_check import SliceError, check, problem
from splitbench.matrix import plan
from tests.conftest import ROOT

CONFIGS = [ROOT / "config/config.yaml", *sorted((ROOT / "config/examples").glob("*.yaml")),
           ROOT / "tests/configs/tiny.yaml"]


@pytest.mark.parametrize(("value", "kind", "said"), [
    ({"pair": "t", "ports": 3}, slices.LinkSlice, "ports: not a key of LinkSlice"),
    ({"rounds": 2, "requests": 5}, slices.PairedSlice,
     "reference: required in PairedSlice, and missing"),
    ({"paired": {"rounds": 2, "requests": 5, "reference": {"pair": 7}}}, slices.CellSlice,
     "paired.reference.pair: expected str, got int 7"),
    ({"prompt_tokens": True}, slices.CellSlice, "prompt_tokens: expected int, got bool"),
    ({"rr_sizes": [64, "16k"]}, slices.LinkCheckSettings,
     "rr_sizes.1: expected int, got str '16k'"),
    ({"max_steal_pct": "5"}, slices.InterferenceLimits,
     "max_steal_pct: expected float or null, got str '5'"),
    ({"short": 512, "long": 8192.5}, slices.Contexts, "long: expected int, got float"),
])
def test_a_slice_that_does_not_hold_to_its_type_is_named_by_its_key(value, kind, said):
    assert problem(value, kind).startswith(said)
    with pytest.raises(SliceError, match=f"^--x: {said[:20]}"):
        check(value, kind, "--x")


def test_what_json_writes_holds():
    # JSON writes 2.0 as 2; a limit left null is not held
    assert problem({"delay_ms": 2, "rate_gbit": 0.5}, slices.LinkSlice) is None
    assert problem({"max_steal_pct": None}, slices.InterferenceLimits) is None
    assert problem({}, slices.CellSlice) is None  # total=False: every key may be absent


def test_a_command_refuses_a_bad_slice_before_it_starts_naming_flag_and_key(capsys):
    with pytest.raises(SystemExit) as ended:
        cli.main(["link", "--spec", json.dumps({"pair": "t", "link": "x", "adress": 1}),
                  "--settings", "{}", "--out", "/nonexistent/never-written.parquet"])
    assert ended.value.code == 2
    said = capsys.readouterr().err
    assert "argument --spec: LinkSlice: adress: not a key of LinkSlice" in said


def _config(path: Path):
    config = yaml.safe_load(path.read_text())
    plan.names_as_text(config)
    return parsed(config)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.name)
def test_every_slice_planned_from_a_shipped_config_holds_to_its_type(path):
    config = _config(path)
    planned = [(plan.cell_slice(config, cell), slices.CellSlice)
               for cell in plan.cells(config)]
    for pair, spec in config.pairs.items():
        planned += [(plan.link_slice(config, pair, link), slices.LinkSlice)
                    for link in spec.links]
        planned += [(spec.hosts.given(), slices.HostsSlice)]
        planned += [(plan.anchor_slice(config, pair, model), slices.CellSlice)
                    for model in config.models]
    for model, spec in config.models.items():
        planned += [(plan.server_slice(config, model), slices.ServerSettings),
                    (spec.given(), slices.ModelSlice)]
    planned += [(plan.roundtrips_slice(config, pair, model, workers), slices.SweepSlice)
                for pair, model, workers in plan.roundtrip_sweeps(config)]
    planned += [(plan.link_check_settings(config), slices.LinkCheckSettings),
                (plan.written(config.drift), slices.DriftSettings),
                (plan.written(config.interference), slices.InterferenceLimits),
                (plan.written(config.slo), slices.SloSettings),
                (config.contexts, slices.Contexts),
                ({m: s.workers for m, s in config.models.items()}, slices.WorkersByModel),
                (plan.pairs_slice(config.pairs), slices.PairViews)]
    assert len(planned) > 10
    assert [said for value, kind in planned if (said := problem(value, kind))] == []
