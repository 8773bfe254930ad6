# Servers: one launch per (pair, link, model); its cells then run back to back on it.
# Link results are `ancient`: re-verifying a link must not relaunch or re-measure.


rule launch:
    input:
        model=results.MODEL_INFO,
        toolchain=backend_toolchain,
        link=ancient(results.LINK),
    output:
        results.LAUNCH,
    log:
        results.log("servers/{pair}/{link}/{model}"),
    priority: launch_priority
    conda:
        "../envs/splitbench.yaml"
    resources:
        **pair_job("launch"),
    params:
        link_spec=lambda w: as_json(plan.link_slice(CONFIG, w.pair, w.link)),
        settings=lambda w: as_json(plan.server_slice(CONFIG, w.model)),
    shell:
        splitbench(
            "launch",
            "--link-spec {params.link_spec:q}",
            "--settings {params.settings:q}",
            "--model {input.model:q}",
            "--toolchain {input.toolchain:q}",
            "--out {output:q}",
        )
