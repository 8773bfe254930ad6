# Report: every cell into one summary, then the tables a person reads.


rule aggregate:
    input:
        links=all_link_results(),
        requests=all_request_results(),
    output:
        summary="results/summary/cells.parquet",
        single_stream="results/tables/single_stream_decode.md",
        links="results/tables/links.md",
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/splitbench.yaml"
    params:
        contexts=as_json(config["contexts"]),
    shell:
        "python -m splitbench aggregate --contexts {params.contexts:q}"
        " --summary {output.summary:q} --tables results/tables"
        " --links {input.links:q} --requests {input.requests:q} > {log:q} 2>&1"
