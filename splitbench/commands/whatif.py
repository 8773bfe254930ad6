"""`whatif`: predict decode for a link of given latency and bandwidth (or like a link of
this run) from this run's measurements."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from splitbench.compare import traffic, whatif
from splitbench.contracts import results
from splitbench.errors import SplitbenchError
from splitbench.summary.cell_summary import read_links

HELP = "predict decode for a link of given latency and bandwidth from this run's measurements"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rtt-us", type=float, default=None,
                   help="the link's request-response latency for a small message (µs): "
                        "what sockperf ping-pong --full-rtt or the links table's 64 B "
                        "round trip reads")
    p.add_argument("--gbit", type=float, default=None,
                   help="the link's rate A→B in Gbit/s (and B→A unless --gbit-b-to-a)")
    p.add_argument("--gbit-b-to-a", type=float, default=None)
    p.add_argument("--like", default=None,
                   help="a link measured in this run: its latency and rates (the flags "
                        "above override either)")
    p.add_argument("--tokens-per-s", type=float, default=None,
                   help="instead of a prediction: the largest latency at which one stream "
                        "still decodes this many tokens per second (at --gbit, else the "
                        "baseline link's rate)")
    p.add_argument("--slo", action="store_true",
                   help="instead of a prediction: the largest latency at which the run's "
                        "slo: level (its tokens/s per stream, for its share of requests) "
                        "still holds on one stream, from the baseline's requests at that "
                        "share")
    p.add_argument("--results", default=results.ROOT, help="the run's results directory")


def run(args: argparse.Namespace) -> int:
    model = Path(results.under(args.results, results.WHATIF))
    if not model.exists():
        raise SplitbenchError(f"no what-if model at {model}: `snakemake --cores 1 all` "
                              "writes it (or give --results)")
    rows = pd.read_parquet(model)
    for line in flagged(args.results, rows):
        print(line)
    if args.slo:
        print(whatif.bound_text(_slo_bound(args, rows)))
        return 0
    if args.tokens_per_s is not None:
        if args.tokens_per_s <= 0:
            raise SplitbenchError("--tokens-per-s must be above 0")
        if rows.empty:
            raise SplitbenchError("no baseline single-stream cell was measured ok: "
                                  "nothing to predict from")
        print(whatif.bound_text(whatif.latency_bound(rows, args.tokens_per_s, args.gbit,
                                                     args.gbit_b_to_a)))
        return 0
    rtt, a_to_b, b_to_a = args.rtt_us, args.gbit, args.gbit_b_to_a
    burst = (0.0, 0.0)
    if args.like:
        links = results.under(args.results, results.LINKS)
        found = sorted(Path(links).glob(f"*/{args.like}.parquet"))
        if not found:
            raise SplitbenchError(f"--like {args.like}: no link of that name under {links}")
        link = read_links([str(p) for p in found]).iloc[0]
        rtt = rtt if rtt is not None else whatif.number(link.get("rr64_p50_us"))
        a_to_b = a_to_b if a_to_b is not None else whatif.number(link.get("a_to_b_gbps"))
        b_to_a = b_to_a if b_to_a is not None else whatif.number(link.get("b_to_a_gbps"))
        burst = tuple(np.nan_to_num(whatif.number(link.get(f"burst_bytes_{w}")))
                      for w in traffic.DIRECTIONS)
    if rtt is None or a_to_b is None:
        raise SplitbenchError("give --rtt-us and --gbit, or --like <a link of this run>")
    if rows.empty:
        raise SplitbenchError("no baseline single-stream cell was measured ok: nothing to "
                              "predict from")
    predicted = whatif.predict(rows, rtt, a_to_b, b_to_a, *burst)
    print(whatif.text(predicted, rtt, a_to_b, b_to_a))
    return 0


def _slo_bound(args: argparse.Namespace, rows: pd.DataFrame) -> pd.DataFrame:
    """latency_bound at the run's service level, from its baseline cells at the share."""
    path = Path(results.under(args.results, results.SERVICE_LEVELS))
    levels = pd.read_parquet(path) if path.exists() else pd.DataFrame()
    if "step_at_share_ms" not in levels or levels["tokens_per_s_target"].isna().all():
        raise SplitbenchError(
            f"--slo: {path} holds no tokens/s level: the run's config had no slo: "
            "tokens_per_s (or the run is older than this option); give --tokens-per-s")
    held = whatif.at_share(rows, levels)
    if held.empty:
        raise SplitbenchError("--slo: no baseline single-stream cell was measured ok at "
                              "the level's share: nothing to predict from")
    tps = float(held["tokens_per_s_target"].iloc[0])
    if args.tokens_per_s is not None:
        tps = args.tokens_per_s
    return whatif.latency_bound(held, tps, args.gbit, args.gbit_b_to_a)


def flagged(root: str, rows: pd.DataFrame) -> list[str]:
    """A ⚠ line per baseline single-stream cell the model rests on that its run flagged
    (other work on the CPUs, timing): a prediction from it carries the same doubt."""
    path = Path(results.under(root, results.SUMMARY))
    if rows.empty or not path.exists():
        return []
    summary = pd.read_parquet(path)
    if "flags" not in summary:
        return []
    used = summary.merge(rows[["pair", "model", "ctx", "baseline"]].rename(
        columns={"baseline": "link"}), on=["pair", "link", "model", "ctx"])
    used = used[(used["conc"] == 1) & used["flags"].notna() & (used["flags"] != "")]
    return [f"⚠ flagged: the baseline cell {r.pair}/{r.link}/{r.model}/{r.ctx} this rests on "
            f"({r.flags})" for r in used.itertuples()]
