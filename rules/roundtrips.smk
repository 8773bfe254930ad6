# Round trips per token: a delay sweep per (pair, model, worker count), then one table.
# Each sweep launches its own servers: on an embedded pair's emulated links of its own,
# on a real pair's baseline link behind delay relays on host A.


rule roundtrips:
    input:
        model=results.MODEL_INFO,
        toolchain=results.TOOLCHAIN,
        link=sweep_link_result,
    output:
        results.ROUNDTRIPS,
    log:
        results.log("roundtrips/{pair}/{model}/w{workers}"),
    conda:
        "../envs/splitbench.yaml"
    resources:
        **pair_job("roundtrips"),
    params:
        spec=lambda w: as_json(
            plan.roundtrips_slice(CONFIG, w.pair, w.model, int(w.workers))
        ),
    shell:
        splitbench(
            "roundtrips",
            "--spec {params.spec:q}",
            "--model {input.model:q}",
            "--toolchain {input.toolchain:q}",
            "--out {output:q}",
        )


rule roundtrips_table:
    input:
        all_roundtrip_results(),
    output:
        results.table("round_trips", "md"),
        results.table("round_trips", "csv"),
    log:
        results.log("roundtrips_table"),
    conda:
        "../envs/splitbench.yaml"
    params:
        interference=as_json(plan.written(CONFIG.interference)),
    shell:
        splitbench(
            "roundtrips-table",
            "--sweeps {input:q}",
            f"--out {results.TABLES}/round_trips",
            "--interference {params.interference:q}",
        )
