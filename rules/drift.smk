# Thermal drift: an anchor cell (short, single stream, baseline link) at the start and
# the end of each model's cells, then a step that names the suspect cells.
# `python -m splitbench drift --apply` gives those cells a new epoch in
# config/reruns.yaml; the next run re-measures exactly them.


rule anchor:
    input:
        unpack(anchor_inputs),
        model="results/models/{model}.json",
        toolchain="results/toolchain/{pair}.json",
        launch=ancient(
            f"results/servers/{{pair}}/{config['baseline_link']}/{{model}}.json"
        ),
        link=ancient(f"results/links/{{pair}}/{config['baseline_link']}.parquet"),
    output:
        tokens="results/anchors/{pair}/{model}/{when}.parquet",
        requests="results/anchors/{pair}/{model}/{when}.requests.parquet",
    log:
        "results/logs/anchors/{pair}/{model}/{when}.log",
    priority: anchor_priority
    conda:
        "../envs/splitbench.yaml"
    params:
        cell=lambda w: as_json(
            plan.cell_slice(config, plan.anchor_cell(config, w.pair, w.model))
        ),
        link_spec=lambda w: as_json(
            plan.link_slice(config, w.pair, config["baseline_link"])
        ),
    shell:
        splitbench(
            "cell",
            "--cell {params.cell:q}",
            "--link-spec {params.link_spec:q}",
            "--model {input.model:q}",
            "--launch {input.launch:q}",
            "--toolchain {input.toolchain:q}",
            "--link-result {input.link:q}",
            "--tokens-out {output.tokens:q}",
            "--requests-out {output.requests:q}",
        )


rule drift:
    input:
        summary="results/summary/cells.parquet",
        anchors=all_anchor_results(),
    output:
        report="results/drift/report.parquet",
        table="results/tables/drift.md",
    log:
        "results/logs/drift.log",
    conda:
        "../envs/splitbench.yaml"
    params:
        settings=as_json(config.get("drift", {})),
        interference=as_json(config.get("interference", {})),
    shell:
        splitbench(
            "drift",
            "--summary {input.summary:q}",
            "--anchors {input.anchors:q}",
            "--settings {params.settings:q}",
            "--interference {params.interference:q}",
            "--report {output.report:q}",
            "--table results/tables/drift",
        )
