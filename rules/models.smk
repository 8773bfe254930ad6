# Models: a deterministic synthetic GGUF from config, or a real GGUF file.


rule synthetic_model:
    output:
        "results/models/{model}.gguf",
    params:
        spec=lambda w: as_json({"synthetic": config["models"][w.model]["synthetic"]}),
    log:
        "results/logs/models/{model}.log",
    shell:
        "{PY} -m splitbench model --spec {params.spec:q} --gguf {output:q}"
        " --write > {log:q} 2>&1"


def model_file(wildcards):
    spec = config["models"][wildcards.model]
    if spec.get("synthetic"):
        return f"results/models/{wildcards.model}.gguf"
    return spec["path"]


rule model_info:
    input:
        model_file,
    output:
        "results/models/{model}.json",
    params:
        spec=lambda w: as_json(config["models"][w.model]),
    log:
        "results/logs/models/{model}.info.log",
    shell:
        "{PY} -m splitbench model --spec {params.spec:q} --gguf {input:q}"
        " --out {output:q} > {log:q} 2>&1"
