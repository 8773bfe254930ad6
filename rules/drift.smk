# Thermal drift: an anchor cell (short, single stream, baseline link) at the start and
# the end of each model's cells, then a step that names the suspect cells.
# `python -m splitbench drift --apply` gives those cells a new epoch in
# config/reruns.yaml; the next run re-measures exactly them.


rule anchor:
    input:
        unpack(anchor_inputs),
        model=results.MODEL_INFO,
        toolchain=backend_toolchain,
        launch=ancient(results.launch("{pair}", CONFIG.baseline_link, "{model}")),
        link=ancient(results.link("{pair}", CONFIG.baseline_link)),
    output:
        tokens=results.ANCHOR,
        requests=results.ANCHOR_REQUESTS,
    log:
        results.log("anchors/{pair}/{model}/{when}"),
    priority: anchor_priority
    conda:
        "../envs/splitbench.yaml"
    resources:
        **pair_job("anchor"),
    params:
        cell=lambda w: as_json(plan.anchor_slice(CONFIG, w.pair, w.model)),
        link_spec=lambda w: as_json(
            plan.link_slice(CONFIG, w.pair, CONFIG.baseline_link)
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
        summary=results.SUMMARY,
        anchors=all_anchor_results(),
    output:
        report=results.DRIFT_REPORT,
        table=results.table("drift", "md"),
        csv=results.table("drift", "csv"),
    log:
        results.log("drift"),
    conda:
        "../envs/splitbench.yaml"
    params:
        settings=as_json(plan.written(CONFIG.drift)),
        interference=as_json(plan.written(CONFIG.interference)),
    shell:
        splitbench(
            "drift",
            "--summary {input.summary:q}",
            "--anchors {input.anchors:q}",
            "--settings {params.settings:q}",
            "--interference {params.interference:q}",
            "--report {output.report:q}",
            f"--table {results.TABLES}/drift",
        )
