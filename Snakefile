# splitbench: what does the link between two machines cost a split LLM?
#
#   link setup + verification -+
#   toolchain (per pair) ------+-> server launch (pair x link x model) -> cells (ctx x conc)
#   model (synthetic or file) -+                                          |
#                                  summary + tables, charts, report <-----+


from snakemake.utils import min_version, validate

from splitbench.matrix import plan
from splitbench.workflow import snakemake_internals

min_version("9.0")


configfile: "config/config.yaml"


plan.names_as_text(config)
validate(config, "config/schema.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/toolchain.smk"
include: "rules/models.smk"
include: "rules/links.smk"
include: "rules/servers.smk"
include: "rules/cells.smk"
include: "rules/roundtrips.smk"
include: "rules/report.smk"
include: "rules/drift.smk"


# Jobs that read and write files only run where Snakemake runs; on a cluster, the
# jobs of a pair's hardware (splitbench/workflow/cluster.py: PAIR_RULES) run on host A's node.
localrules:
    all,
    model_file,
    model_own,
    model_fetch,
    model_info,
    aggregate,
    link_comparison,
    tables,
    charts,
    report,
    checks,
    roundtrips_table,
    drift,
    findings,


# Every cell, link check and anchor is listed here even though the summary needs them
# too: Snakemake does not re-make a missing input of a job whose outputs exist (a cell
# deleted or interrupted after the summary was made; a context added).
rule all:
    default_target: True
    input:
        all_link_results(),
        all_launch_records(),
        all_cell_results(),
        roundtrip_targets(),
        all_anchor_results(),
        results.table("drift", "md"),
        results.SUMMARY,
        results.COMPARISON,
        results.table("single_stream_decode", "md"),
        results.table("links", "md"),
        expand(results.CHART, name=CHART_NAMES, ext=["html", "png"]),
        results.FINDINGS,
        results.FINDINGS_DATA,
        results.REPORT,
        results.CHECKS,


# Planning a 5,000-cell matrix: Snakemake's per-job repeats, done once
# (splitbench/workflow/snakemake_internals.py).
snakemake_internals.name_parameters_once(workflow.rules)
snakemake_internals.check_each_group_once()
