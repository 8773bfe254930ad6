"""The typed config model is the one place for keys, defaults and checks: the schema and
the reference are generated from it, and the code's defaults are its defaults."""

from __future__ import annotations

import copy

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from splitbench import backends, configuration
from splitbench.configuration import reference
from splitbench.infra import interference
from splitbench.matrix import plan
from tests.conftest import ROOT

SHIPPED = [ROOT / "config/config.yaml", ROOT / "tests/configs/tiny.yaml",
           *sorted((ROOT / "config/examples").glob("*.yaml"))]


def test_the_committed_schema_and_reference_are_the_generated_ones():
    assert reference.main(["--check"]) == 0, "run python -m splitbench.configuration"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_pass_the_schema_and_the_checks(path):
    config = yaml.safe_load(path.read_text())
    plan.names_as_text(config)
    validate(config, str(configuration.SCHEMA))
    backends.check_models(configuration.parsed(config))


def _default_config() -> dict:
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


@pytest.mark.parametrize("mutate", [
    lambda c: c.update(concurrency=[1, 1]),
    lambda c: c["pairs"]["lab"]["links"]["5gbe"].update(rate_gbit=None),  # not nullable
    lambda c: c["pairs"]["lab"]["links"].update({"Bad Name": {}}),
    lambda c: c["pairs"]["lab"].update(mode="cloud"),
    lambda c: c.update(drift={"peak_margin_c": None}),
    lambda c: c.update(link_check={"rr_sizes": [64]}),
    lambda c: c["models"]["synth"].pop("layers_on_b"),
    lambda c: c.update(report={"timeline_cell": "a/b"}),
], ids=["duplicate-concurrency", "null-rate", "link-name", "mode", "null-margin",
        "one-rr-size", "no-layers-on-b", "timeline-cell"])
def test_the_generated_schema_refuses_what_the_model_refuses(mutate):
    config = _default_config()
    mutate(config)
    with pytest.raises(Exception, match="ValidationError|is not valid|Error validating"):
        validate(config, str(configuration.SCHEMA))


def test_nullable_keys_take_null_and_validate_writes_only_schema_defaults():
    config = _default_config()
    config.update(drift={"max_temp_rise_c": None, "reference_c": [None, 80]},
                  interference={"max_steal_pct": None},
                  link_check={"iperf_block": None})
    before = copy.deepcopy(config)
    validate(config, str(configuration.SCHEMA))
    # Schema defaults filled in: the cell section's; the code's (drift) left alone.
    assert config["cell"]["n_predict"] == configuration.defaults(configuration.CellSpec)[
        "n_predict"]
    assert config["drift"] == before["drift"] and config["pairs"] == before["pairs"]


def test_the_code_uses_the_models_defaults():
    assert configuration.drift_settings({})["max_temp_rise_c"] == 10.0
    assert interference.settings({}) == configuration.defaults(configuration.Interference)
    config = _default_config()
    del config["link_check"]
    checks = plan.link_check_settings(configuration.parsed(config))
    assert checks["rr_sizes"] == configuration.LinkCheck.model_fields["rr_sizes"].default
    sweep = plan.roundtrip_settings(configuration.parsed({**config, "roundtrips": {}}))
    assert sweep["delays_ms"] == [0.0, 0.5, 1.0, 2.0] and sweep["models"] == ["synth"]


def test_sockperf_is_in_a_links_settings_only_where_the_config_sets_it():
    """Links verified before the key existed keep their job's settings (nothing re-runs);
    verify reads an absent key as its default, on."""
    config = _default_config()
    assert config["link_check"].pop("sockperf") is False  # the lab's default leaves it out
    assert "sockperf" not in plan.link_check_settings(configuration.parsed(config))
    assert configuration.LinkCheck.model_fields["sockperf"].default is True
    off = {**config, "link_check": {"sockperf": False}}
    assert plan.link_check_settings(configuration.parsed(off))["sockperf"] is False
    config["link_check"] = {"sockperf": False}
    validate(config, str(configuration.SCHEMA))
    config["link_check"] = {"sockperf": "no"}
    with pytest.raises(WorkflowError, match="sockperf"):
        validate(config, str(configuration.SCHEMA))


def test_a_drift_band_out_of_order_is_refused_by_key():
    with pytest.raises(configuration.ConfigError, match="drift.reference_c.*low 90 >= high 85"):
        configuration.drift_settings({"drift": {"reference_c": [90, 85]}})


def test_a_synthetic_model_too_large_to_make_is_refused_by_key():
    config = _default_config()
    config["models"]["synth"]["synthetic"].update(n_layer=128, n_embd=8192, n_ff=28672,
                                                  n_head=64)
    plan.names_as_text(config)
    validate(config, str(configuration.SCHEMA))
    with pytest.raises(configuration.ConfigError,
                       match=r"models\.synth\.synthetic.*GiB of weights.*at most 4 GiB"):
        configuration.parsed(config)
    # The shipped one is far below it: 2 blocks of width 64 and 2,048 tokens.
    assert configuration.synthetic_bytes(_default_config()["models"]["synth"]["synthetic"]) \
        < 1 << 20
