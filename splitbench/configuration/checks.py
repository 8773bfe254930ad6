"""The checks across keys that a schema cannot make, each naming its key; and the
settings read with their defaults."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import ValidationError

from splitbench.configuration import owned
from splitbench.configuration.keys import ConfigError, defaults
from splitbench.configuration.owned import KeyProblem
from splitbench.configuration.sections import (
    Config,
    Drift,
    Hosts,
    LinkSpec,
    Model,
    Pair,
)
from splitbench.contracts import registry
from splitbench.contracts.slices import DriftSettings, LinkSlice, ModelSlice

# A synthetic model is generated in memory (float32, then float16) before it is
# written: one larger than this would take the machine's memory, not test a link.
SYNTHETIC_MAX_BYTES = 4 << 30


def synthetic_bytes(spec: dict[str, int]) -> int:
    """The float16 weights of a `synthetic` block, in bytes."""
    embd, ff, n_layer = spec["n_embd"], spec["n_ff"], spec["n_layer"]
    kv_dim = embd // spec["n_head"] * spec.get("n_head_kv", spec["n_head"])
    per_block = 2 * embd * embd + 2 * kv_dim * embd + 3 * ff * embd + 2 * embd
    return 2 * (2 * spec["n_vocab"] * embd + n_layer * per_block + embd)


def _check_synthetic_size(where: str, spec: dict[str, int]) -> None:
    size = synthetic_bytes(spec)
    if size > SYNTHETIC_MAX_BYTES:
        raise ConfigError(where, f"{size / 2**30:.1f} GiB of weights; a synthetic model is "
                          f"made in memory and may hold at most "
                          f"{SYNTHETIC_MAX_BYTES / 2**30:.0f} GiB (use a real GGUF, path:)")


def parsed(config: dict[str, Any]) -> Config:
    """The config as the typed model, its keys and the checks across them (`check`, once
    the model holds them), or a ConfigError naming the first key it refuses (the path
    into the config, dotted: `pairs.lab.links.5gbe.rate_gbit`)."""
    try:
        typed = Config.model_validate(config)
    except ValidationError as error:
        first = error.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, KeyProblem):  # a key under the section it names
            where = ".".join(str(part) for part in (*first["loc"], cause.key))
            raise ConfigError(where, cause.problem) from None
        if isinstance(cause, ConfigError):
            raise ConfigError(cause.key, cause.problem) from None
        where = ".".join(str(part) for part in first["loc"]) or "(the config)"
        raise ConfigError(where, first["msg"]) from None
    check(typed)
    return typed


def check(config: Config) -> None:
    """Cross-key checks a schema cannot express (`parsed` runs them once the keys are
    read). Raises ConfigError naming the key."""
    baseline = config.baseline_link
    for pair, spec in config.pairs.items():
        if baseline not in spec.links:
            raise ConfigError(
                "baseline_link",
                f"'{baseline}' is not a link of pair '{pair}' (links: {sorted(spec.links)})",
            )
    for pair, spec in config.pairs.items():
        _check_node(pair, spec.hosts)
        PAIR_KINDS[spec.mode].check(pair, spec)
    if config.toolchain.source == "path":
        for pair, spec in config.pairs.items():
            for side in PAIR_KINDS[spec.mode].sides_with_a_build:
                if not getattr(spec.hosts, side).bin_dir:
                    raise ConfigError(
                        f"pairs.{pair}.hosts.{side}.bin_dir",
                        "required when toolchain.source is 'path'",
                    )
    _check_roundtrips(config)
    paired = config.cell.paired
    for ctx in (paired.contexts if paired else None) or []:
        if ctx not in config.contexts:
            raise ConfigError("cell.paired.contexts",
                              f"'{ctx}' is not a context (contexts: {sorted(config.contexts)})")
    for name, model in config.models.items():
        _check_model(config, name, model)


def _check_model(config: Config, name: str, model: Model) -> None:
    given = [k for k in ("synthetic", "path", "source") if getattr(model, k)]
    if len(given) != 1:
        raise ConfigError(f"models.{name}", "give exactly one of synthetic, path or "
                          f"source (given: {', '.join(given) or 'none'})")
    if model.synthetic:
        _check_synthetic_size(f"models.{name}.synthetic", model.synthetic.given())
    backend = model.backend
    if backend not in registry.names():
        raise ConfigError(f"models.{name}.backend", f"no backend '{backend}' (built in: "
                          f"{', '.join(registry.BUILT_IN)}; another is a folder named "
                          f"in {registry.VARIABLE}: docs/backends.md)")
    # What the model's backend itself refuses is its own `check_model`'s
    # (backends.check_models, before anything starts).
    synth = model.synthetic
    if synth:
        if synth.n_embd % synth.n_head:
            raise ConfigError(f"models.{name}.synthetic.n_head", "must divide n_embd")
        if synth.n_head % (synth.n_head_kv or synth.n_head):
            raise ConfigError(f"models.{name}.synthetic.n_head_kv", "must divide n_head")
        n_predict = config.cell.n_predict
        longest = max(config.contexts.values())
        if longest + n_predict > synth.context_length:
            raise ConfigError(
                f"models.{name}.synthetic.context_length",
                f"{synth.given().get('context_length')} is below the longest context "
                f"({longest}) plus n_predict ({n_predict})",
            )


def _check_roundtrips(config: Config) -> None:
    sweep = config.roundtrips
    if sweep is None:
        return
    for model in sweep.models or swept_models(config):
        if model not in config.models:
            raise ConfigError("roundtrips.models",
                              f"'{model}' is not a model (models: {sorted(config.models)})")
        backend = config.models[model].backend
        if not owned.sweeps_round_trips(backend):
            swept = [name for name in registry.names() if owned.sweeps_round_trips(name)]
            raise ConfigError("roundtrips.models", f"'{model}': the sweep counts a backend's "
                              f"round trips per token; backend {backend} has none to count "
                              f"(backends with a sweep: {', '.join(swept)})")
        for workers in sweep.workers:
            check_workers("roundtrips.workers", workers, f"models.{model}",
                          config.models[model].given())


def swept_models(config: Config) -> list[str]:
    """The models whose backend's round trips per token the delay sweep counts (its
    config section says so: llama.cpp's RPC workers)."""
    return [name for name, spec in config.models.items()
            if owned.sweeps_round_trips(spec.backend)]


def check_workers(key: str, workers: int, where: str, model: ModelSlice) -> None:
    """Each RPC worker holds at least one of B's layers (`where`: the model's key)."""
    if workers > model["layers_on_b"]:
        raise ConfigError(key, f"{workers} workers need at least {workers} layers on B; "
                               f"{where}.layers_on_b is {model['layers_on_b']}")


def _check_node(pair: str, hosts: Hosts) -> None:
    """The cluster node is host A's (the pair's job runs there); one way to name it."""
    for key in ("node", "feature"):
        if getattr(hosts.b, key):
            raise ConfigError(f"pairs.{pair}.hosts.b.{key}",
                              "host B is reached from host A; only host A names a node")
    if hosts.a.node and hosts.a.feature:
        raise ConfigError(f"pairs.{pair}.hosts.a", "give node or feature, not both")


def _check_ssh_pair(pair: str, spec: Pair) -> None:
    if not spec.hosts.b.ssh:
        raise ConfigError(f"pairs.{pair}.hosts.b.ssh", "required when mode is 'ssh'")
    for link, link_spec in spec.links.items():
        written = link_spec.model_fields_set
        for key in ("interface_a", "interface_b"):
            if key not in written:
                raise ConfigError(f"pairs.{pair}.links.{link}.{key}", "required in mode 'ssh'")
        if not link_spec.adopt:
            for key in ("addr_a", "addr_b"):
                if key not in written:
                    raise ConfigError(f"pairs.{pair}.links.{link}.{key}",
                                      "required unless adopt: true")
        for key in ("rate_gbit", "rate_gbit_b_to_a", "delay_ms"):
            if key in written:
                raise ConfigError(f"pairs.{pair}.links.{link}.{key}",
                                  "emulation applies to embedded pairs only")


def link_index(link: str, spec: LinkSlice) -> int:
    """The link's number on an embedded pair (its /30 subnet and veth name): set in config,
    or derived from its name, so that adding or reordering links changes no other link's
    addresses (and so re-runs nothing). 200 and up are the round-trip sweep's."""
    if "index" in spec:
        return spec["index"]
    return 1 + int(hashlib.sha256(link.encode()).hexdigest(), 16) % 199


def _check_link_indexes(pair: str, links: dict[str, LinkSpec]) -> None:
    taken: dict[int, str] = {}
    for link, spec in links.items():
        index = link_index(link, spec.given())
        if index in taken:
            raise ConfigError(f"pairs.{pair}.links.{link}.index",
                              f"links '{taken[index]}' and '{link}' get the same emulated "
                              f"subnet ({index}); set index: <1-199> on one of them")
        taken[index] = link
class PairKindKeys(NamedTuple):
    """What one kind of pair (its `mode:`; its code is splitbench/pairs) asks of its keys
    beyond the schema: its own check, and the hosts that need a llama.cpp build of their
    own where toolchain.source is 'path'."""

    check: Callable[[str, Pair], None]
    sides_with_a_build: tuple[str, ...]


PAIR_KINDS = {
    "embedded": PairKindKeys(lambda pair, spec: _check_link_indexes(pair, spec.links),
                             ("a", "b")),
    # An SSH host B may have no build: the run carries A's worker there.
    "ssh": PairKindKeys(_check_ssh_pair, ("a",)),
}


def drift_settings(config: dict[str, Any] | None) -> DriftSettings:
    """The `drift:` settings with defaults filled in; a band's bounds in order."""
    given = dict((config or {}).get("drift") or {})
    unknown = set(given) - set(Drift.model_fields)
    if unknown:
        raise ConfigError("drift", f"unknown setting(s) {sorted(unknown)}")
    merged = {**defaults(Drift), **given}
    band = merged["reference_c"]
    if band is not None:
        if len(band) != 2:
            raise ConfigError("drift.reference_c", "give [low, high] in C")
        low, high = band
        if low is not None and high is not None and low >= high:
            raise ConfigError("drift.reference_c", f"low {low} >= high {high}")
        merged["reference_c"] = [low, high]
    return merged
