# Links: set up (or adopt) each link of a pair and verify it: throughput, ping, RR latency.


rule link:
    output:
        results.LINK,
    log:
        results.log("links/{pair}/{link}"),
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    resources:
        **pair_job("link"),
    params:
        spec=lambda w: as_json(plan.link_slice(CONFIG, w.pair, w.link)),
        settings=as_json(plan.link_check_settings(CONFIG)),
    shell:
        splitbench(
            "link",
            "--spec {params.spec:q}",
            "--settings {params.settings:q}",
            "--out {output:q}",
        )
