"""The workflow's own Python, which the Snakefile and rules/ only bind: the checks made
before anything starts (`preflight`), what each rule's jobs need from the matrix
(`jobs`), and the one module that touches Snakemake's internals
(`snakemake_internals`)."""
