"""The tail of every distribution a cell measured, not only its median.

Per cell and metric, from the ok requests of the cell's own link (a paired cell's
reference rows are the baseline's) and their tokens as each arrived: count, mean, p50,
p90, p99, max (numpy's linear percentiles), and the p99's standard error from a
bootstrap over requests (the gaps of one request are not independent of each other, so
requests, not gaps, are resampled). A p99 from fewer than TAIL_MIN_SAMPLES values has no
value beyond it to stand on: it is marked as too few, with no ±.

The metrics and their names follow NVIDIA AIPerf's where it has one:

time_to_first_token_ms       per request: first token's arrival less the send
inter_token_latency_ms       every gap between two consecutive tokens of a stream
time_per_output_token_ms     per request: its decode time per token (vLLM's TPOT)
request_latency_ms           per request: the end of its response less the send
output_token_throughput_per_user  per request: its decode tokens per second
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from splitbench.contracts import results
from splitbench.infra import memo
from splitbench.infra.parquet_io import numbers
from splitbench.summary.cell_summary import read_requests

# The metrics in the order the table shows them, with their units.
METRICS = {
    "time_to_first_token_ms": "ms",
    "inter_token_latency_ms": "ms",
    "time_per_output_token_ms": "ms",
    "request_latency_ms": "ms",
    "output_token_throughput_per_user": "tokens/s",
}
STATS = ["count", "mean", "p50", "p90", "p99", "max", "p99_se"]
# Below this many values no value lies beyond a p99: it is the maximum, not a tail.
TAIL_MIN_SAMPLES = 100
BOOTSTRAP_DRAWS = 200
COLUMNS = [*results.CELL_KEYS, "metric", "unit", *STATS, "p99_too_few"]
# What the percentiles, the tail's shift and the service levels read of a cell's requests.
REQUEST_COLUMNS = ["request_id", "repeat", "status", "cell_status", "reference", "t_send_ns",
                   "t_first_ns", "t_last_ns", "t_end_ns", "ttft_ms", "decode_ms_per_token",
                   "decode_tps"]


def table(request_files: Sequence[str]) -> pd.DataFrame:
    """One row per cell and metric (COLUMNS), for every cell with ok requests."""
    rows = []
    for path in request_files:
        requests = requests_of(path)
        mine = own_ok(requests)
        if mine.empty:
            continue
        key = {k: mine[k].iat[0] for k in results.CELL_KEYS}
        gaps = gaps_of(results.tokens_of(path), set(request_keys(mine)))
        for metric, values in per_request_values(mine, gaps).items():
            rows.append({**key, "metric": metric, "unit": METRICS[metric],
                         **stats(values)})
    return pd.DataFrame(rows, columns=COLUMNS)


def requests_of(path: str) -> pd.DataFrame:
    """One cell file's request rows (REQUEST_COLUMNS), as the percentiles, the tail's
    shift and the service levels read them: made once per file stamp. Shared: read,
    never change it."""
    try:
        found = os.stat(path)
    except OSError:  # read_requests makes a file it cannot read the cell's error row
        return read_requests([path], REQUEST_COLUMNS)
    return _requests_of(str(path), found.st_mtime_ns, found.st_size)


@functools.lru_cache(maxsize=memo.BATCH)
def _requests_of(path: str, _mtime_ns: int, _size: int) -> pd.DataFrame:
    return read_requests([path], REQUEST_COLUMNS)


def own_ok(requests: pd.DataFrame) -> pd.DataFrame:
    reference = requests["reference"].fillna(False).astype(bool) \
        if "reference" in requests else False
    return requests[(requests["status"] == "ok") & ~reference]


def request_keys(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """Each row's request: (repeat, request_id); a cell's repeats number their requests
    from 0 each."""
    request = frame["request_id"].astype("int64").to_numpy()  # a missing id raises
    repeat = (frame["repeat"].fillna(0).to_numpy(dtype="int64") if "repeat" in frame
              else np.zeros(len(request), dtype="int64"))
    return list(zip(repeat.tolist(), request.tolist(), strict=True))


def gaps_of(tokens_file: Path, wanted: set[tuple[int, int]]
            ) -> dict[tuple[int, int], np.ndarray]:
    """Each request's gaps between consecutive tokens (ms), in token order."""
    if not tokens_file.exists():
        return {}
    found = tokens_file.stat()
    every = _all_gaps(str(tokens_file), found.st_mtime_ns, found.st_size)
    return {key: gaps for key, gaps in every.items() if key in wanted}


# The percentiles and the tail's shift each read a batch of cells' tokens (the
# aggregate's memo computes BATCH cells at a time, infra/memo.py), the baseline link's
# cells once per other link: a batch's files' gaps kept, keyed by each file's stamp.
@functools.lru_cache(maxsize=memo.BATCH)
def _all_gaps(path: str, _mtime_ns: int, _size: int) -> dict[tuple[int, int], np.ndarray]:
    source = pq.ParquetFile(path)
    present = set(source.schema_arrow.names)
    names = [c for c in ("repeat", "request_id", "token_index", "t_ns") if c in present]
    table = source.read(columns=names)

    def column(name: str) -> np.ndarray:
        if name not in names:
            return np.zeros(table.num_rows, dtype=np.int64)
        return table[name].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)

    repeat, request, index, t_ns = (column(c) for c in
                                     ("repeat", "request_id", "token_index", "t_ns"))
    order = np.lexsort((index, request, repeat))
    repeat, request, t_ns = repeat[order], request[order], t_ns[order]
    starts = np.flatnonzero(np.r_[True, (np.diff(repeat) != 0) | (np.diff(request) != 0)])
    ends = np.r_[starts[1:], len(order)]
    return {(int(repeat[a]), int(request[a])): np.diff(t_ns[a:b]) / 1e6
            for a, b in zip(starts, ends, strict=True)}


def per_request_values(requests: pd.DataFrame, gaps: dict[tuple[int, int], np.ndarray]
                       ) -> dict[str, list[np.ndarray]]:
    """Per metric, one array of values per request (a request's gaps, or its one
    figure): the bootstrap resamples these arrays."""
    def one(values: pd.Series) -> list[np.ndarray]:
        return [np.array([v]) for v in values.to_numpy(dtype=float) if np.isfinite(v)]

    # The response's end; its last token where a row predates the end's stamp.
    end = numbers(requests, "t_end_ns").fillna(numbers(requests, "t_last_ns"))
    latency = (end - numbers(requests, "t_send_ns")) / 1e6
    return {
        "time_to_first_token_ms": one(numbers(requests, "ttft_ms")),
        "inter_token_latency_ms": [gaps[k] for k in request_keys(requests)
                                   if k in gaps and len(gaps[k])],
        "time_per_output_token_ms": one(numbers(requests, "decode_ms_per_token")),
        "request_latency_ms": one(latency),
        "output_token_throughput_per_user": one(numbers(requests, "decode_tps")),
    }


def stats(per_request: list[np.ndarray], seed: int = 0) -> dict[str, float | bool | None]:
    """count, mean, p50, p90, p99, max of every value; the p99's bootstrap standard
    error over requests; and whether the p99 stands on too few values."""
    values = np.concatenate(per_request) if per_request else np.array([])
    if values.size == 0:
        return {**dict.fromkeys(STATS), "count": 0, "p99_too_few": True}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    too_few = values.size < TAIL_MIN_SAMPLES
    return {"count": int(values.size), "mean": float(values.mean()), "p50": float(p50),
            "p90": float(p90), "p99": float(p99), "max": float(values.max()),
            "p99_se": None if too_few else _bootstrap_se(per_request, seed),
            "p99_too_few": bool(too_few)}


def _bootstrap_se(per_request: list[np.ndarray], seed: int) -> float | None:
    """The p99's standard error: its spread over resamples of the requests."""
    draws = bootstrap(per_request, seed)
    return None if draws is None else float(np.std(draws[:, 1], ddof=1))


def bootstrap(per_request: list[np.ndarray], seed: int = 0) -> np.ndarray | None:
    """(p50, p99) of BOOTSTRAP_DRAWS resamples of the requests, with replacement (None
    from fewer than two requests: nothing to resample)."""
    if len(per_request) < 2:
        return None
    return resampled_quantiles(per_request, (50, 99), seed)


# Resamples weighed at once, at most this many values x draws at a time (memory).
_CHUNK_CELLS = 4_000_000


def resampled_quantiles(per_request: list[np.ndarray], quantiles: tuple[float, ...],
                        seed: int = 0, method: str = "linear") -> np.ndarray:
    """The `quantiles` (percent) of BOOTSTRAP_DRAWS resamples of the requests, with
    replacement: one row per draw. The same draws and the same figures as np.percentile
    over each resample's concatenated values (`method`: "linear" or "inverted_cdf"),
    computed for all draws at once: a resample is every value once, weighed by how
    often its request was drawn, so its k-th value in order is where the weights'
    running sum first passes k (a draw of no values gives NaN)."""
    rng = np.random.default_rng(seed)
    count = len(per_request)
    picks = rng.integers(0, count, (BOOTSTRAP_DRAWS, count))
    drawn = np.zeros((BOOTSTRAP_DRAWS, count), dtype=np.int64)
    np.add.at(drawn, (np.arange(BOOTSTRAP_DRAWS)[:, None], picks), 1)
    values = np.concatenate(per_request).astype(float)
    owner = np.repeat(np.arange(count), [len(v) for v in per_request])
    order = np.argsort(values, kind="stable")
    values, owner = values[order], owner[order]
    out = np.full((BOOTSTRAP_DRAWS, len(quantiles)), np.nan)
    step = max(1, _CHUNK_CELLS // max(values.size, 1))
    for start in range(0, BOOTSTRAP_DRAWS, step):
        rows = slice(start, start + step)
        running = np.cumsum(drawn[rows][:, owner], axis=1)
        total = running[:, -1] if values.size else np.zeros(len(running), dtype=np.int64)
        for j, q in enumerate(quantiles):
            out[rows, j] = _weighted(values, running, total, q / 100, method)
    return out


def _weighted(values: np.ndarray, running: np.ndarray, total: np.ndarray, q: float,
              method: str) -> np.ndarray:
    def kth(k: np.ndarray) -> np.ndarray:
        """Each draw's k-th value (0-based) in order."""
        return values[np.minimum((running <= k[:, None]).sum(axis=1), values.size - 1)]

    with np.errstate(invalid="ignore"):
        if method == "inverted_cdf":
            picked = kth(np.maximum(np.ceil(q * total) - 1, 0))
        else:  # numpy's linear: between the order statistics around q x (n - 1)
            at = q * (total - 1)
            low = np.floor(at)
            below, above = kth(low), kth(np.minimum(low + 1, total - 1))
            picked = below + (at - low) * (above - below)
    return np.where(total > 0, picked, np.nan)
