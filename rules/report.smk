# Report: one rule per stage package. Every cell into one summary (summary/), every link
# against the baseline once (compare/), the tables, charts and the one page a person
# reads (report/: results/report.html), what the run found (findings/), and last its
# checks (health/).


rule aggregate:
    input:
        requests=all_request_results(),
    output:
        summary=results.SUMMARY,
        percentiles=results.PERCENTILES,
        tail_shift=results.TAIL_SHIFT,
        service_levels=results.SERVICE_LEVELS,
    log:
        results.log("aggregate"),
    conda:
        "../envs/splitbench.yaml"
    params:
        contexts=as_json(CONFIG.contexts),
        baseline=CONFIG.baseline_link,
        interference=as_json(plan.written(CONFIG.interference)),
        slo=as_json(plan.written(CONFIG.slo)),
        between_runs=as_json(plan.between_runs(CONFIG)),
    shell:
        splitbench(
            "aggregate",
            "--contexts {params.contexts:q}",
            "--baseline {params.baseline:q}",
            "--interference {params.interference:q}",
            "--slo {params.slo:q}",
            "--between-runs {params.between_runs:q}",
            "--summary {output.summary:q}",
            "--requests {input.requests:q}",
        )


# Every link against the baseline, once (results/summary/comparison.parquet: the tables,
# findings, charts and `compare` read it), and the what-if model behind
# `python -m splitbench whatif`.
rule link_comparison:
    input:
        summary=results.SUMMARY,
        links=all_link_results(),
        anchors=all_anchor_results(),
        sweeps=all_roundtrip_results(),
    output:
        comparison=results.COMPARISON,
        whatif=results.WHATIF,
        points=results.WHATIF_POINTS,
    log:
        results.log("link_comparison"),
    conda:
        "../envs/splitbench.yaml"
    params:
        baseline=CONFIG.baseline_link,
        interference=as_json(plan.written(CONFIG.interference)),
        workers=as_json({m: s.workers for m, s in CONFIG.models.items()}),
    shell:
        splitbench(
            "link-comparison",
            "--summary {input.summary:q}",
            "--links {input.links:q}",
            "--baseline {params.baseline:q}",
            "--anchors {input.anchors:q}",
            "--sweeps {input.sweeps:q}",
            "--workers {params.workers:q}",
            "--interference {params.interference:q}",
            "--out {output.comparison:q}",
            "--whatif {output.whatif:q}",
            "--points {output.points:q}",
        )


# Every table a person reads, as Markdown and CSV under results/tables/.
rule tables:
    input:
        summary=results.SUMMARY,
        percentiles=results.PERCENTILES,
        tail_shift=results.TAIL_SHIFT,
        service_levels=results.SERVICE_LEVELS,
        comparison=results.COMPARISON,
        links=all_link_results(),
    output:
        tables=expand(results.TABLE, stem=contents.TABLE_STEMS, ext=["md", "csv"]),
    log:
        results.log("tables"),
    conda:
        "../envs/splitbench.yaml"
    params:
        contexts=as_json(CONFIG.contexts),
        baseline=CONFIG.baseline_link,
        interference=as_json(plan.written(CONFIG.interference)),
        slo=as_json(plan.written(CONFIG.slo)),
    shell:
        splitbench(
            "tables",
            "--summary {input.summary:q}",
            "--comparison {input.comparison:q}",
            "--links {input.links:q}",
            "--contexts {params.contexts:q}",
            "--baseline {params.baseline:q}",
            "--interference {params.interference:q}",
            "--slo {params.slo:q}",
            f"--tables {results.TABLES}",
        )


# What the run found, in sentences (results/findings.md, the report's first section) and
# as data (results/findings.json: the run's last lines, `compare`).
rule findings:
    input:
        summary=results.SUMMARY,
        comparison=results.COMPARISON,
        whatif=results.WHATIF,
        links=all_link_results(),
        toolchain=all_toolchain_records(),
        sweeps=all_roundtrip_results(),
        drift=results.DRIFT_REPORT,
        tail_shift=results.TAIL_SHIFT,
        service_levels=results.SERVICE_LEVELS,
        tables=expand(results.TABLE, stem=contents.TABLE_STEMS, ext="csv"),
    output:
        findings=results.FINDINGS,
        data=results.FINDINGS_DATA,
    log:
        results.log("findings"),
    conda:
        "../envs/splitbench.yaml"
    params:
        contexts=as_json(CONFIG.contexts),
        baseline=CONFIG.baseline_link,
        interference=as_json(plan.written(CONFIG.interference)),
        slo=as_json(plan.written(CONFIG.slo)),
    shell:
        splitbench(
            "findings",
            "--summary {input.summary:q}",
            "--comparison {input.comparison:q}",
            "--whatif {input.whatif:q}",
            "--links {input.links:q}",
            "--toolchain {input.toolchain:q}",
            "--sweeps {input.sweeps:q}",
            "--drift {input.drift:q}",
            "--tails {input.tail_shift:q}",
            "--service-levels {input.service_levels:q}",
            "--slo {params.slo:q}",
            "--contexts {params.contexts:q}",
            "--baseline {params.baseline:q}",
            "--out {output.findings:q}",
            "--data {output.data:q}",
            f"--tables {results.TABLES}",
            "--interference {params.interference:q}",
        )


# The charts splitbench.report.charts draws, in the report's order.
CHART_NAMES = list(contents.CHARTS)


rule charts:
    input:
        summary=results.SUMMARY,
        # The decode Δ chart: the run's link comparison.
        comparison=results.COMPARISON,
        # The decode-vs-latency chart draws this table's slopes: one estimator.
        mechanisms=results.table("mechanisms", "csv"),
        links=all_link_results(),
        # The what-if chart: the decode model and the measured links beside it.
        whatif=results.WHATIF,
        whatif_points=results.WHATIF_POINTS,
        # The token-gaps chart: every cell's inter-token latency percentiles.
        percentiles=results.PERCENTILES,
        # The what-if chart's target line: the slo: level's tokens/s.
        levels=results.SERVICE_LEVELS,
    output:
        html=expand(results.CHART, name=CHART_NAMES, ext="html"),
        # Each PNG with its caption, for `snakemake --report`.
        png=[
            report(
                results.chart(name, "png"),
                caption=f"../report/charts/{name}.rst",
                category="Charts",
                labels={"chart": name.replace("_", " ")},
            )
            for name in CHART_NAMES
        ],
        spec=expand(results.CHART, name=CHART_NAMES, ext="vl.json"),
    log:
        results.log("charts"),
    conda:
        "../envs/splitbench.yaml"
    params:
        baseline=CONFIG.baseline_link,
        timeline=plan.written(CONFIG.report).get("timeline_cell", ""),
    shell:
        splitbench(
            "charts",
            "--summary {input.summary:q}",
            "--links {input.links:q}",
            "--baseline {params.baseline:q}",
            "--timeline={params.timeline:q}",
            "--mechanisms {input.mechanisms:q}",
            "--whatif {input.whatif:q}",
            "--whatif-points {input.whatif_points:q}",
            "--percentiles {input.percentiles:q}",
            "--service-levels {input.levels:q}",
            "--comparison {input.comparison:q}",
            f"--out {results.CHARTS}",
        )


rule report:
    input:
        # The tables by name, not rules.tables.output: a rule dependency makes
        # Snakemake hash the whole input list once per input file, quadratic in the
        # cells (docs/development.md).
        summary=results.SUMMARY,
        tables=expand(results.TABLE, stem=contents.TABLE_STEMS, ext=["md", "csv"]),
        links=all_link_results(),
        toolchain=all_toolchain_records(),
        charts=expand(results.CHART, name=CHART_NAMES, ext="vl.json"),
        # Tables written by other steps, so that the page shows them.
        other_tables=[*roundtrip_targets(), results.table("drift", "md")],
        drift=results.DRIFT_REPORT,
        # The page's first section.
        findings=results.FINDINGS,
    output:
        report(
            results.REPORT,
            caption="../report/report.rst",
            category="Report",
        ),
    log:
        results.log("report"),
    conda:
        "../envs/splitbench.yaml"
    params:
        # Where each pair's hosts are, for the run block (only that: the rest of a
        # pair's config does not re-run the report).
        pairs=as_json(plan.pairs_slice(CONFIG.pairs)),
        # The cells' request files, read for the run block's dates and clocks. Not
        # inputs: the summary already waits for every cell (and is re-made when one is
        # re-measured), and 5,000 more inputs would cost a second of planning.
        requests=all_request_results(),
    shell:
        splitbench(
            "report",
            "--summary {input.summary:q}",
            "--links {input.links:q}",
            "--toolchain {input.toolchain:q}",
            "--requests {params.requests:q}",
            f"--tables {results.TABLES}",
            f"--charts {results.CHARTS}",
            "--drift {input.drift:q}",
            "--pairs {params.pairs:q}",
            "--findings {input.findings:q}",
            "--out {output:q}",
        )


# Last: the run's checks, printed; the job (and so the run) fails when a block's
# servers did not load, after everything else was measured and reported.
rule checks:
    input:
        report=results.REPORT,
        drift=results.DRIFT_REPORT,
        findings=results.FINDINGS_DATA,
    output:
        results.CHECKS,
    log:
        results.log("checks"),
    conda:
        "../envs/splitbench.yaml"
    shell:
        f"python -m splitbench checks --results {results.ROOT} --out {{output:q}} 2>&1"
        " | tee {log:q}; exit ${{PIPESTATUS[0]}}"
