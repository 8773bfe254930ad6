import copy

import pytest
import yaml

from splitbench import backends, configuration
from splitbench.configuration import parsed
from splitbench.matrix import plan
from tests.conftest import ROOT


@pytest.fixture
def config():
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


def test_default_matrix_is_links_x_models_x_contexts_x_concurrency(config):
    cells = plan.cells(parsed(config))
    assert len(cells) == 4 * 1 * 2 * 3  # links x models x contexts x concurrency
    assert cells[0].path == "results/cells/lab/baseline/synth/ctxshort_c1.parquet"


def test_blocks_run_in_order_with_descending_priority(config):
    blocks = plan.blocks(parsed(config))
    priorities = [plan.block_priority(parsed(config), *b) for b in blocks]
    assert priorities == sorted(priorities, reverse=True)
    assert len(set(priorities)) == len(blocks)


def test_setup_jobs_outrank_every_launch_and_anchor(config):
    """A later block's launch must never be picked while a link check or model an
    earlier block needs is still waiting: Snakemake does not lift a job's inputs."""
    blocks = plan.blocks(parsed(config))
    top = max(max(plan.launch_priority(parsed(config), *b, order=blocks),
                  plan.anchor_priority(parsed(config), b[0], b[2], "start", order=blocks))
              for b in blocks)
    assert plan.setup_priority(blocks) > top


def test_server_is_sized_for_the_longest_prompt_at_the_highest_concurrency(config):
    settings = plan.server_slice(parsed(config), "synth")
    assert settings["slots"] == 4
    # The prompt, the tokens it asks for and a margin of 64, rounded up to 256.
    longest = max(config["contexts"].values()) + config["cell"]["n_predict"] + 64
    assert longest <= settings["ctx_per_slot"] < longest + 256
    assert settings["ctx_per_slot"] % 256 == 0
    assert settings["n_ctx"] == 4 * settings["ctx_per_slot"]


def test_cell_slice_does_not_depend_on_other_cells_or_models(config):
    cell = plan.Cell("lab", "5gbe", "synth", "short", 1)
    before = plan.cell_slice(parsed(config), cell)
    bigger = copy.deepcopy(config)
    bigger["contexts"]["52k"] = 52000
    bigger["models"]["other"] = copy.deepcopy(config["models"]["synth"])
    bigger["concurrency"].append(8)
    assert plan.cell_slice(parsed(bigger), cell) == before


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda c: c.update(baseline_link="nope"), "baseline_link"),
        (lambda c: c["models"]["synth"].update(layers_on_b=99), "models.synth.layers_on_b"),
        (lambda c: c["models"]["synth"]["synthetic"].update(n_head=3),
         "models.synth.synthetic.n_head"),
        (lambda c: c["contexts"].update(huge=200000),
         "models.synth.synthetic.context_length"),
        (lambda c: c["toolchain"].update(source="path"), "pairs.lab.hosts.a.bin_dir"),
    ],
)
def test_bad_config_names_the_key(config, mutate, key):
    mutate(config)
    with pytest.raises(configuration.ConfigError) as error:
        backends.check_models(configuration.parsed(config))
    assert error.value.key == key
    assert key in str(error.value)


def test_schema_validation_adds_nothing_to_the_blocks_jobs_receive(config):
    """validate() writes schema defaults into the config; blocks that reach jobs as
    params must not change, or every job re-runs after a schema edit."""
    from snakemake.utils import validate

    before = copy.deepcopy(config)
    validate(config, str(ROOT / "config/schema.yaml"))
    assert config["pairs"] == before["pairs"]
    assert config["models"]["synth"]["synthetic"] == before["models"]["synth"]["synthetic"]


@pytest.mark.parametrize("links", [None, ["baseline"]])
def test_anchors_and_launches_bracket_each_models_blocks(links):
    """Each model's launches, anchors and cells run together, and no job of one model
    ties with a job of another (a tie lets Snakemake run the next model's launch before
    this one's end anchor, and each anchor then relaunches its server). `links`: only
    the baseline, as in the backends comparison."""
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["models"]["other"] = config["models"]["synth"]
    if links:
        config["pairs"]["lab"]["links"] = {k: v for k, v in
                                           config["pairs"]["lab"]["links"].items() if k in links}
    cfg = parsed(config)
    order = []  # (priority, model, what), run highest first
    for pair, link, model in plan.blocks(cfg):
        order.append((plan.block_priority(cfg, pair, link, model), model, f"cells {link}"))
        order.append((plan.launch_priority(cfg, pair, link, model), model, f"launch {link}"))
    for model in config["models"]:
        for when in ("start", "end"):
            order.append((plan.anchor_priority(cfg, "lab", model, when), model, when))
    ranked = sorted(order, reverse=True)
    for model in config["models"]:
        mine = [i for i, (_, owner, _) in enumerate(ranked) if owner == model]
        assert mine == list(range(mine[0], mine[-1] + 1)), ranked  # contiguous
        assert ranked[mine[0]][2] == "launch baseline" and ranked[mine[1]][2] == "start"
        assert ranked[mine[-1]][2] == "end", ranked
    for (high, one, _), (low, other, _) in zip(ranked, ranked[1:], strict=False):
        assert one == other or high > low, ranked  # no tie across models


def test_entries_merged_in_from_the_workflow_config_are_named():
    default = {"pairs": {"lab": {"links": {"5gbe": {"rate_gbit": 5}, "usb4": {}}}},
               "models": {"synth": {"synthetic": {"n_layer": 2}, "threads": 1}},
               "contexts": {"short": 128}}
    mine = {"pairs": {"rig": {"links": {"veth": {}}}}, "models": {"synth": {"path": "x"}}}
    assert plan.entries_merged_in(default, [mine]) == [
        "pairs.lab", "models.synth.synthetic", "models.synth.threads"]
    # A copy of the lab that drops a link gets it back from the merge, and is told so.
    trimmed = {"pairs": {"lab": {"links": {"5gbe": {"rate_gbit": 5}}}}}
    assert plan.entries_merged_in(default, [trimmed]) == ["pairs.lab.links.usb4"]
    # Keys the files leave out (contexts here) are meant to come from the workflow's.
    assert plan.entries_merged_in(default, [{"repeats": 3}]) == []
    assert plan.entries_merged_in(default, [default]) == []


def test_names_that_yaml_reads_as_numbers_are_names():
    config = yaml.safe_load("""
contexts: {short: 128, 512: 512}
models: {7: {synthetic: {}}}
baseline_link: 1
pairs: {lab: {links: {1: {}, 2: {rate_gbit: 1.0}}}}
roundtrips: {models: [7]}
cell: {paired: {contexts: [512]}}
""")
    plan.names_as_text(config)
    assert list(config["contexts"]) == ["short", "512"]
    assert list(config["models"]) == ["7"] and config["roundtrips"]["models"] == ["7"]
    assert list(config["pairs"]["lab"]["links"]) == ["1", "2"]
    assert config["baseline_link"] == "1"
    assert config["cell"]["paired"]["contexts"] == ["512"]


def test_the_baseline_links_block_runs_first_wherever_the_config_lists_it():
    """The start anchor runs on the baseline's launch; were another link's block first,
    the baseline's cells would have to launch it again (seen with a config written in
    sorted key order: 5gbe before baseline)."""
    config = plan.read_yaml(ROOT / "config/examples/two-pairs.yaml")
    for spec in config["pairs"].values():
        spec["links"] = dict(sorted(spec["links"].items()))  # baseline no longer first
    assert list(config["pairs"]["north"]["links"]) == ["5gbe", "baseline"]
    assert plan.blocks(parsed(config)) == [
        ("north", "baseline", "synth"), ("north", "5gbe", "synth"),
        ("south", "baseline", "synth"), ("south", "usb4", "synth")]
    order = plan.blocks(parsed(config))
    assert plan.anchor_priority(parsed(config), "north", "synth", "start", order) > \
        plan.block_priority(parsed(config), "north", "baseline", "synth", order) > \
        plan.block_priority(parsed(config), "north", "5gbe", "synth", order)


def test_each_rotation_turns_the_links_after_the_baseline(config):
    """Unpaired comparisons are time-ordered: each run turns its links by its own
    rotation, the baseline's block always first (the start anchor runs on its launch)."""
    def links(rotation):
        return [link for _, link, _ in plan.blocks(parsed(config), rotation)]
    assert list(config["pairs"]["lab"]["links"]) == ["baseline", "5gbe", "usb4", "usb10g"]
    assert links(0) == ["baseline", "5gbe", "usb4", "usb10g"]
    assert links(1) == ["baseline", "usb4", "usb10g", "5gbe"]
    assert links(2) == ["baseline", "usb10g", "5gbe", "usb4"]
    assert links(3) == links(0)
    lasts = {links(r)[-1] for r in range(plan.ROTATIONS // 9240)}
    assert lasts == {"5gbe", "usb10g", "usb4"}  # each link is measured last in some run


def test_a_run_keeps_the_rotation_it_recorded_and_names_an_unreadable_file(tmp_path,
                                                                           config):
    order_file = tmp_path / "results" / "block_order.json"
    rotation = plan.chosen_rotation(order_file)
    assert 0 <= rotation < plan.ROTATIONS
    blocks = plan.blocks(parsed(config), rotation)
    plan.record_order(order_file, rotation, blocks)
    assert plan.chosen_rotation(order_file) == rotation  # the run that resumes
    plan.record_order(order_file, rotation + 1, blocks)  # written once
    assert plan.chosen_rotation(order_file) == rotation
    order_file.write_text("{}")
    with pytest.raises(configuration.ConfigError, match="block_order.json"):
        plan.chosen_rotation(order_file)
