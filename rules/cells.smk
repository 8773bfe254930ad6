# Cells: one (context, concurrency) measurement on a running launch.
# Params hold only this cell's slice of config: adding a model or a context elsewhere
# schedules only the new cells.


rule cell:
    input:
        model=results.MODEL_INFO,
        toolchain=backend_toolchain,
        launch=ancient(results.LAUNCH),
        link=ancient(results.LINK),
        reference=reference_link_result,
    output:
        tokens=results.CELL,
        requests=results.CELL_REQUESTS,
    log:
        results.log("cells/{pair}/{link}/{model}/ctx{ctx}_c{conc}"),
    priority: block_priority
    conda:
        "../envs/splitbench.yaml"
    resources:
        **pair_job("cell"),
    params:
        cell=lambda w: as_json(
            plan.cell_slice(
                CONFIG,
                plan.Cell(w.pair, w.link, w.model, w.ctx, int(w.conc)),
                epoch=cell_epoch(w),
            )
        ),
        link_spec=lambda w: as_json(plan.link_slice(CONFIG, w.pair, w.link)),
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
