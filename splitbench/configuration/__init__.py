"""The configuration, typed: every key, its type and limits, its default and what it means,
and the checks across keys. The workflow reads the config once into `Config`
(`parsed`), and planning reads that model. `config/schema.yaml` (which Snakemake
validates against first) and `config/README.md` (the reference) are generated from it:

    python -m splitbench.configuration            # rewrite both (reference.py)
    python -m splitbench.configuration --check    # fail when either is out of date

A default is applied in one of two places, and each key says which:
- `schema`: written into the config by Snakemake's validate(), so it is part of the
  config slices that jobs get as params (their rerun trigger);
- `code`: applied where the setting is used (`defaults(Section)`). Pairs, links, hosts
  and the optional sections (roundtrips, drift, interference) take no schema defaults:
  a default written into them would change every existing job's params.

The package: `sections` (the model), `owned` (the backends' keys, each declared in its
backend's `section.py`), `checks` (across keys), `reference` (the generated files).
"""

from __future__ import annotations

from splitbench.configuration.checks import (
    SYNTHETIC_MAX_BYTES,
    check,
    check_workers,
    drift_settings,
    link_index,
    parsed,
    swept_models,
    synthetic_bytes,
)
from splitbench.configuration.keys import ConfigError, Section, defaults, key, required
from splitbench.configuration.sections import (
    REFERENCE,
    ROOT,
    SCHEMA,
    CellSpec,
    Config,
    ContextName,
    Drift,
    Hosts,
    HostSpec,
    Interface,
    Interference,
    LinkCheck,
    LinkName,
    LinkSpec,
    Model,
    ModelName,
    Pair,
    Paired,
    PairName,
    Report,
    Roundtrips,
    SlurmName,
    Source,
    Synthetic,
    Toolchain,
)

__all__ = [
    "CellSpec",
    "Config",
    "ConfigError",
    "ContextName",
    "Drift",
    "HostSpec",
    "Hosts",
    "Interface",
    "Interference",
    "LinkSpec",
    "LinkCheck",
    "LinkName",
    "Model",
    "ModelName",
    "Pair",
    "PairName",
    "Paired",
    "REFERENCE",
    "ROOT",
    "Report",
    "Roundtrips",
    "SCHEMA",
    "SYNTHETIC_MAX_BYTES",
    "Section",
    "SlurmName",
    "Source",
    "Synthetic",
    "Toolchain",
    "check",
    "check_workers",
    "defaults",
    "drift_settings",
    "key",
    "link_index",
    "swept_models",
    "parsed",
    "required",
    "synthetic_bytes",
]
