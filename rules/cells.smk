# Cells: one (context, concurrency) measurement on a running launch.
# Params hold only this cell's slice of config: adding a model or a context elsewhere
# schedules only the new cells.


rule cell:
    input:
        model="results/models/{model}.json",
        toolchain="results/toolchain/{pair}.json",
        launch=ancient("results/servers/{pair}/{link}/{model}.json"),
        link=ancient("results/links/{pair}/{link}.parquet"),
        reference=reference_link_result,
    output:
        tokens="results/cells/{pair}/{link}/{model}/ctx{ctx}_c{conc}.parquet",
        requests="results/cells/{pair}/{link}/{model}/ctx{ctx}_c{conc}.requests.parquet",
    log:
        "results/logs/cells/{pair}/{link}/{model}/ctx{ctx}_c{conc}.log",
    priority: block_priority
    conda:
        "../envs/splitbench.yaml"
    params:
        cell=lambda w: as_json(
            plan.cell_slice(
                config,
                plan.Cell(w.pair, w.link, w.model, w.ctx, int(w.conc)),
                epoch=cell_epoch(w),
            )
        ),
        link_spec=lambda w: as_json(plan.link_slice(config, w.pair, w.link)),
    shell:
        splitbench(
            "cell",
            "--cell {params.cell:q}",
            "--link-spec {params.link_spec:q}",
            "--model {input.model:q}",
            "--launch {input.launch:q}",
            "--toolchain {input.toolchain:q}",
            "--link-result {input.link:q}",
            "--reference-result={input.reference:q}",
            "--tokens-out {output.tokens:q}",
            "--requests-out {output.requests:q}",
        )
