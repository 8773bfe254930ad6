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
    params:
        spec=lambda w: as_json(
            plan.roundtrips_slice(config, w.pair, w.model, int(w.workers))
        ),
    shell:
        "python -m splitbench roundtrips --spec {params.spec:q} --model {input.model:q}"
        " --toolchain {input.toolchain:q} --out {output:q} > {log:q} 2>&1"


rule roundtrips_table:
    input:
        all_roundtrip_results(),
    output:
        "results/tables/round_trips.md",
        "results/tables/round_trips.csv",
    log:
        "results/logs/roundtrips_table.log",
    shell:
        "python -m splitbench roundtrips-table --sweeps {input:q}"
        " --out results/tables/round_trips > {log:q} 2>&1"
