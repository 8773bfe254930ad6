"""The workflow's own Python, which the Snakefile and rules/ only bind: the checks made
before anything starts (`preflight`) and the doctor that makes them for a person
(`doctor`), what each rule's jobs need from the matrix (`jobs`) and from a cluster
(`cluster`: a pair's slot, node and time limit), and the one module that touches
Snakemake's internals (`snakemake_internals`)."""
