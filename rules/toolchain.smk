# Toolchain: which llama.cpp build each host of a pair runs; refuse mismatched builds.


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


# Each host's vLLM, for the pair's models with backend vllm (a record of its own: adding
# a vLLM model re-runs nothing of the llama.cpp blocks).
rule toolchain_vllm:
    output:
        results.TOOLCHAIN_VLLM,
    log:
        results.log("toolchain/{pair}.vllm"),
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    resources:
        **pair_job("toolchain"),
    params:
        hosts=lambda w: as_json(CONFIG.pairs[w.pair].hosts.given()),
    shell:
        splitbench(
            "toolchain-vllm",
            "--pair {wildcards.pair:q}",
            "--hosts {params.hosts:q}",
            "--out {output:q}",
        )
