# Report: every cell into one summary, then the tables, the charts and the one page
# (results/report.html) a person reads.


rule aggregate:
    input:
        links=all_link_results(),
        requests=all_request_results(),
        anchors=all_anchor_results(),
        sweeps=all_roundtrip_results(),
    output:
        summary="results/summary/cells.parquet",
        tables=expand(
            "results/tables/{stem}.{ext}", stem=tables.TABLE_STEMS, ext=["md", "csv"]
        ),
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/splitbench.yaml"
    params:
        contexts=as_json(config["contexts"]),
        baseline=config["baseline_link"],
        interference=as_json(config.get("interference", {})),
        workers=as_json({m: s.get("workers", 1) for m, s in config["models"].items()}),
    shell:
        splitbench(
            "aggregate",
            "--contexts {params.contexts:q}",
            "--baseline {params.baseline:q}",
            "--interference {params.interference:q}",
            "--anchors {input.anchors:q}",
            "--sweeps {input.sweeps:q}",
            "--workers {params.workers:q}",
            "--summary {output.summary:q}",
            "--tables results/tables",
            "--links {input.links:q}",
            "--requests {input.requests:q}",
        )


# The charts splitbench.report.charts draws, in the report's order.
CHART_NAMES = list(charts.CHARTS)


rule charts:
    input:
        summary="results/summary/cells.parquet",
        # The decode-vs-latency chart draws this table's slopes: one estimator.
        mechanisms="results/tables/mechanisms.csv",
        links=all_link_results(),
        # The token timeline's cell is chosen from the summary when the job runs.
        cells=all_cell_results(),
    output:
        html=expand("results/charts/{name}.html", name=CHART_NAMES),
        # Each PNG with its caption, for `snakemake --report`.
        png=[
            report(
                f"results/charts/{name}.png",
                caption=f"../report/charts/{name}.rst",
                category="Charts",
                labels={"chart": name.replace("_", " ")},
            )
            for name in CHART_NAMES
        ],
        spec=expand("results/charts/{name}.vl.json", name=CHART_NAMES),
    log:
        "results/logs/charts.log",
    conda:
        "../envs/splitbench.yaml"
    params:
        baseline=config["baseline_link"],
        timeline=config.get("report", {}).get("timeline_cell", ""),
    shell:
        splitbench(
            "charts",
            "--summary {input.summary:q}",
            "--links {input.links:q}",
            "--baseline {params.baseline:q}",
            "--timeline={params.timeline:q}",
            "--mechanisms {input.mechanisms:q}",
            "--out results/charts",
        )


rule report:
    input:
        aggregate=rules.aggregate.output,
        summary="results/summary/cells.parquet",
        links=all_link_results(),
        toolchain=expand("results/toolchain/{pair}.json", pair=config["pairs"]),
        requests=all_request_results(),
        charts=expand("results/charts/{name}.vl.json", name=CHART_NAMES),
        # Tables written by other steps, so that the page shows them.
        tables=[*roundtrip_targets(), "results/tables/drift.md"],
        drift="results/drift/report.parquet",
    output:
        report(
            "results/report.html",
            caption="../report/report.rst",
            category="Report",
        ),
    log:
        "results/logs/report.log",
    conda:
        "../envs/splitbench.yaml"
    shell:
        splitbench(
            "report",
            "--summary {input.summary:q}",
            "--links {input.links:q}",
            "--toolchain {input.toolchain:q}",
            "--requests {input.requests:q}",
            "--tables results/tables",
            "--charts results/charts",
            "--drift {input.drift:q}",
            "--out {output:q}",
        )


# Last: the run's checks, printed; the job (and so the run) fails when a block's
# servers did not load, after everything else was measured and reported.
rule checks:
    input:
        report="results/report.html",
        drift="results/drift/report.parquet",
    output:
        "results/checks.txt",
    log:
        "results/logs/checks.log",
    conda:
        "../envs/splitbench.yaml"
    shell:
        "python -m splitbench checks --results results --out {output:q} 2>&1 | tee {log:q};"
        " exit ${{PIPESTATUS[0]}}"
