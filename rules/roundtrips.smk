# Round trips per token: a delay sweep per (embedded pair, model, worker count), then
# one table. Each sweep launches its own servers on its own emulated links.


rule roundtrips:
    input:
        model="results/models/{model}.json",
        toolchain="results/toolchain/{pair}.json",
    output:
        "results/roundtrips/{pair}/{model}/w{workers}.parquet",
    log:
        "results/logs/roundtrips/{pair}/{model}/w{workers}.log",
    conda:
        "../envs/splitbench.yaml"
    params:
        spec=lambda w: as_json(
            plan.roundtrips_slice(config, w.pair, w.model, int(w.workers))
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
        "results/tables/round_trips.md",
        "results/tables/round_trips.csv",
    log:
        "results/logs/roundtrips_table.log",
    conda:
        "../envs/splitbench.yaml"
    shell:
        splitbench(
            "roundtrips-table",
            "--sweeps {input:q}",
            "--out results/tables/round_trips",
        )
