"""Hand-made matrices for the tests of the summary and its tables: request rows from
their inter-token gaps, and summary rows of one cell each."""

from __future__ import annotations

import numpy as np
import pandas as pd

CONTEXTS = {"short": 128, "long": 4096}
ORDER = ["short", "long"]


def request(request_id: int, gaps_ms: list[float], *, send_ns: int = 0, ttft_ms: float = 10.0,
            status: str = "ok", cell_status: str = "ok", wall_ms: float | None = None,
            prompt: int = 128, n_predict: int | None = None, **extra) -> dict:
    """One request row as the cells stage writes it, from its inter-token gaps."""
    times = np.cumsum([ttft_ms, *gaps_ms]) * 1e6 + send_ns
    n = len(times)
    row = {
        "request_id": request_id, "status": status, "cell_status": cell_status,
        "t_send_ns": send_ns, "t_last_ns": int(times[-1]), "generated_tokens": n,
        "n_predict": n_predict or n, "prompt_tokens": prompt, "ttft_ms": ttft_ms,
        "prefill_tps": prompt / ttft_ms * 1000,
        "decode_ms_per_token": float(np.mean(gaps_ms)),
        "decode_tps": 1000 / float(np.mean(gaps_ms)),
        "decode_ms_se": float(np.std(gaps_ms, ddof=1) / np.sqrt(len(gaps_ms))),
        "cell_wall_ms": wall_ms if wall_ms is not None else (times[-1] - send_ns) / 1e6,
        "launch_id": "L", "link_fingerprint": "F", "temp_before_c": None,
        "temp_after_c": None,
        # A quiet machine, measured (a row without these is "not checked").
        "foreign_cpu_a_cores": 0.0, "foreign_cpu_b_cores": 0.0,
        "cpu_pressure_a_pct": 5.0, "cpu_pressure_b_pct": 5.0,
    }
    return row | extra


def cell(link: str, ctx: str, conc: int = 1, *, status: str = "ok", decode_ms: float = 10.0,
         se: float | None = 0.1, prefill: float = 1000.0, model: str = "m",
         overlap: float | None = None, **extra) -> dict:
    ok = status == "ok"
    return {"pair": "lab", "link": link, "model": model, "ctx": ctx, "conc": conc,
            "status": status, "decode_ms_per_token": decode_ms if ok else np.nan,
            "decode_tps": 1000 / decode_ms if ok else np.nan, "decode_ms_se": se,
            "prefill_tps": prefill if ok else np.nan, "overlap": overlap,
            "ctx_tokens": CONTEXTS[ctx], "prompt_tokens": CONTEXTS[ctx] if ok else np.nan,
            "ttft_ms": CONTEXTS[ctx] / prefill * 1000 if ok else np.nan,
            "server_prefill_tps": prefill if ok else np.nan} | extra


def frame(*cells: dict) -> pd.DataFrame:
    return pd.DataFrame(list(cells))


def comparison_row(table: pd.DataFrame, link: str, ctx: str) -> pd.Series:
    return table[(table["link"] == link) & (table["ctx"] == ctx)].iloc[0]


def release_request(request_id: int, *, shot: int, send_ms: float, wall_ms: float,
                    decode_ms: float = 10.0, ttft_ms: float = 10.0, n: int = 10,
                    status: str = "ok", cell_status: str = "ok",
                    n_predict: int | None = None, release_wall_ms: float | None = None,
                    **extra) -> dict:
    """One request row of a release: sent at send_ms, its last token wall_ms later."""
    send_ns = int(send_ms * 1e6)
    return {
        "request_id": request_id, "status": status, "cell_status": cell_status,
        "repeat": 0, "shot": shot, "round": 0, "reference": False,
        "t_send_ns": send_ns, "t_last_ns": send_ns + int(wall_ms * 1e6),
        "generated_tokens": n, "n_predict": n_predict or n, "prompt_tokens": 128,
        "ttft_ms": ttft_ms, "prefill_tps": 128 / ttft_ms * 1000,
        "decode_ms_per_token": decode_ms, "decode_tps": 1000 / decode_ms,
        "decode_ms_se": 0.001, "cell_wall_ms": None, "cell_throughput_tps": None,
        "release_wall_ms": release_wall_ms if release_wall_ms is not None else wall_ms,
        "release_throughput_tps": None, "launch_id": "L", "link_fingerprint": "F",
        "temp_before_c": None, "temp_after_c": None,
        "foreign_cpu_a_cores": 0.0, "foreign_cpu_b_cores": 0.0,
        "cpu_pressure_a_pct": 5.0, "cpu_pressure_b_pct": 5.0,
    } | extra


def link_row(name: str, rr_us: float, gbps: float) -> dict:
    """A link check's row of the pair lab: its request-response latency and throughput."""
    row = {"pair": "lab", "link": name, "ping_ms": 0.1, "rr16k_p50_us": rr_us + 40,
           "rr_fixed_us": rr_us, "rr_us_per_kb": 2.0, "negotiated_gbps": None,
           "emulation_rate": "none", "emulation_delay": "none", "flags": ""}
    for column in ["a_to_b_gbps", "b_to_a_gbps", "bidir_gbps"]:
        row |= {column: gbps, f"{column}_min": gbps, f"{column}_max": gbps}
    return row
