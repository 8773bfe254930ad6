# Models: a deterministic synthetic GGUF from config, or a real GGUF file.


rule synthetic_model:
    output:
        "results/models/{model}.gguf",
    log:
        "results/logs/models/{model}.log",
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    params:
        spec=lambda w: as_json({"synthetic": config["models"][w.model]["synthetic"]}),
    shell:
        "python -m splitbench model --spec {params.spec:q} --gguf {output:q}"
        " --write > {log:q} 2>&1"


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
        "python -m splitbench model --spec {params.spec:q} --gguf {input:q}"
        " --out {output:q} > {log:q} 2>&1"
