"""What each job gets: the slices of the config that `plan` hands to a rule's params,
as typed dicts.

A slice crosses the process boundary as JSON (the job's params, its rerun trigger), so
it stays a dict, and a key that the config does not set is absent, not None: these
types name every key a slice may hold and what it holds. Each command holds the slices
it is given to them on entry (`splitbench.contracts.slice_check`), and the tests hold every slice
the planner makes from each shipped config to them. Standard library only: a cell's job
reads them and must not pay for pydantic.
"""

from __future__ import annotations

from typing import Any, TypedDict


class HostSlice(TypedDict, total=False):
    """One host of a pair as the config writes it (`pairs.<pair>.hosts.<a|b>`)."""

    bin_dir: str
    ssh: str
    ssh_port: int
    identity: str
    known_hosts: str
    python: str
    node: str
    feature: str
    vllm_venv: str


class HostsSlice(TypedDict):
    a: HostSlice
    b: HostSlice


class LinkSlice(TypedDict, total=False):
    """A link job's `--spec` and a cell's `--link-spec` (`plan.link_slice`): the link's
    keys as written, where it sits, and for an SSH pair its hosts and firewall."""

    pair: str
    link: str
    mode: str
    index: int
    same_path_at_zero_delay: bool
    rate_gbit: float
    rate_gbit_b_to_a: float
    delay_ms: float
    expected_gbps: float
    interface_a: str
    interface_b: str
    addr_a: str
    addr_b: str
    prefix: int
    mtu: int
    adopt: bool
    hosts: HostsSlice
    firewall: str


class LinkCheckSettings(TypedDict, total=False):
    """How a link is verified (`plan.link_check_settings`: `link_check:` with its
    defaults; `sockperf` only where the config sets it)."""

    iperf_seconds: int
    iperf_omit: int
    iperf_streams: int
    iperf_block: int | None
    iperf_repeats: int
    iperf_spread_rel: float | None
    rr_payload_bytes: int
    rr_sizes: list[int]
    rr_samples: int
    sockperf: bool
    asymmetry_threshold: float
    change_threshold: float
    hold_wakeup_latency: bool


class ModelSlice(TypedDict, total=False):
    """One model as the config writes it (`plan.model_slice`), `threads` always set.
    The nested sections (`synthetic`, `source`) are as written too, and so is the
    backend's own section under its name (`vllm:`; `slice_check.OPEN_TO_BACKENDS`).
    layers_on_b, server_args, worker_args and workers are the default backend's keys
    (llama.cpp's, declared in its section.py)."""

    backend: str
    synthetic: dict[str, int]
    path: str
    source: dict[str, str]
    layers_on_b: int
    threads: int
    server_args: list[str]
    worker_args: list[str]
    workers: int


class ServerSettings(TypedDict, total=False):
    """A launch's settings (`plan.server_slice`, planned by the model's backend:
    `Backend.server_settings`). llama.cpp's: layers_on_b, threads, slots, ctx_per_slot,
    n_ctx, and workers, server_args, worker_args where set; vLLM's: its `vllm:` section
    with defaults, slots and max_model_len; another backend's: backend, slots,
    max_tokens, threads, and its own section under its name where it plans one."""

    backend: str
    slots: int
    threads: int
    max_tokens: int
    # llama.cpp
    layers_on_b: int
    ctx_per_slot: int
    n_ctx: int
    workers: int
    server_args: list[str]
    worker_args: list[str]
    # vLLM
    tensor_parallel: int
    pipeline_parallel: int
    dtype: str
    kv_cache_gib: float
    launch_timeout_s: float
    step_timeout_s: float
    extra_args: list[str]
    max_model_len: int


class PairedSlice(TypedDict):
    """How a single-stream cell measures itself against the baseline link, round by
    round (`plan.paired_for`)."""

    rounds: int
    requests: int
    reference: LinkSlice


class CellSlice(TypedDict, total=False):
    """A cell job's `--cell` (`plan.cell_slice`): exactly what its measurement depends
    on. A single stream carries no release keys, a concurrent cell no request keys;
    `repeats`, `paired` and `epoch` only where they apply."""

    measurement_version: int
    prompt_tokens: int
    concurrency: int
    n_predict: int
    request_timeout_s: float
    crash_below_tps: float
    single_stream_requests: int
    single_stream_seconds: float
    concurrent_releases: int
    concurrent_seconds: float
    hold_wakeup_latency: bool
    model: ModelSlice
    repeats: int
    paired: PairedSlice
    # The targets this kind of cell reads (plan.precision_for), only where set.
    precision: dict[str, float]
    # The interference limits the rule's early stop reads, only where the config sets them.
    interference: InterferenceLimits
    epoch: int


class SweepPoints(TypedDict, total=False):
    """How a round-trips sweep visits its delay points (`roundtrips:` with defaults)."""

    delays_ms: list[float]
    requests: int
    prompt_tokens: int
    n_predict: int
    rr_samples: int
    request_timeout_s: float
    hold_wakeup_latency: bool


class SweepSlice(SweepPoints, total=False):
    """A round-trips sweep job's settings (`plan.roundtrips_slice`)."""

    pair: str
    model: str
    workers: int
    server: ServerSettings
    link: LinkSlice  # on a real pair: its baseline link, which the points share


class SweepSettings(SweepPoints, total=False):
    """`roundtrips:` with its defaults (`plan.roundtrip_settings`): the models and worker
    counts to sweep, and how each sweep visits its points."""

    models: list[str]
    workers: list[int]


class InterferenceLimits(TypedDict, total=False):
    """`interference:` as written; absent limits take their defaults
    (`infra.interference.settings`), a null limit is not checked."""

    max_cpu_pressure_pct: float | None
    max_foreign_cpu_cores: float | None
    max_steal_pct: float | None


class DriftSettings(TypedDict, total=False):
    """`drift:` with its defaults (`configuration.drift_settings`)."""

    reference_c: list[float | None] | None
    max_temp_rise_c: float | None
    peak_margin_c: float
    anchor_tolerance: float | None
    anchor_margin_c: float


class SloSettings(TypedDict, total=False):
    """`slo:` as written (`Slo`): the service level each request is held to."""

    ttft_ms: float | None
    tokens_per_s: float | None
    share_pct: float


class PairView(TypedDict):
    """What the report shows of one pair (`plan.pairs_slice`)."""

    mode: str
    hosts: dict[str, dict[str, str | int]]
    links: list[str]


# The report's `--contexts` (name -> prompt tokens) and `--workers` (model -> workers).
Contexts = dict[str, int]
WorkersByModel = dict[str, int]
# Per pair, the run-to-run calibration its figures' ± carries (`plan.between_runs`:
# config/between_runs.yaml's contents for the pairs it was measured on; {} for others).
BetweenRuns = dict[str, dict[str, Any]]
PairViews = dict[str, PairView]
