# Toolchain: which llama.cpp build each host of a pair runs, and a backend's own
# toolchain where it keeps one; refuse mismatched builds.


# Each pair's first job: the host checks (links/readiness.py, the doctor's) come before
# its link checks, so that a pair that is not ready says so first.
rule toolchain:
    output:
        results.TOOLCHAIN,
    log:
        results.log("toolchain/{pair}"),
    priority: SETUP_PRIORITY + 1
    conda:
        "../envs/splitbench.yaml"
    resources:
        **pair_job("toolchain"),
    params:
        source=CONFIG.toolchain.source,
        hosts=lambda w: as_json(CONFIG.pairs[w.pair].hosts.given()),
    shell:
        splitbench(
            "toolchain",
            "--pair {wildcards.pair:q}",
            "--source {params.source:q}",
            "--hosts {params.hosts:q}",
            "--out {output:q}",
        )


# A backend's own toolchain record of each host (vLLM's), for the pair's models of that
# backend: a record of its own, so that adding such a model re-runs nothing of the
# llama.cpp blocks.
rule toolchain_own:
    output:
        results.TOOLCHAIN_OWN,
    log:
        results.log("toolchain/{pair}.{backend}"),
    wildcard_constraints:
        backend=own_toolchains(),
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    resources:
        **pair_job("toolchain"),
    params:
        hosts=lambda w: as_json(CONFIG.pairs[w.pair].hosts.given()),
    shell:
        splitbench(
            "toolchain",
            "--pair {wildcards.pair:q}",
            "--backend {wildcards.backend:q}",
            "--hosts {params.hosts:q}",
            "--out {output:q}",
        )
