"""Is decode's bandwidth term real? SmolLM2-135M over rate-shaped links with no added delay.

Runs the workflow (a scratch copy of it, real servers on the embedded lab) with
SmolLM2-135M (its logits: 196,608 B B->A per token) on the baseline link and on two
links that differ from it only in rate (1.19 and 0.6 Gbit/s, tbf, the same relay path at
zero delay), each single-stream cell paired with the baseline round by round. Prints,
per link, the measured decode difference and the predicted one split into its latency
and bandwidth terms: the latency term should be near zero and the measured difference
should agree with the bandwidth term. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bandwidth_term.py [--rounds 24] [--dir DIR] [--dry-run]

Needs root (network namespaces) and PyPI (the model's wheel). About 6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent


def config(rounds: int) -> dict:
    real = yaml.safe_load((ROOT / "config/examples/real-model.yaml").read_text())
    return {
        "measurement_version": 1,
        "toolchain": {"source": "pip"},
        "pairs": {"lab": {"mode": "embedded", "hosts": {"a": {}, "b": {}}, "links": {
            # Every lab link takes the same relay path (here at zero delay): only the
            # rate differs.
            "baseline": {},
            "r1190": {"rate_gbit": 1.19},
            "r600": {"rate_gbit": 0.6},
        }}},
        "baseline_link": "baseline",
        "models": {"smol": real["models"]["smol"]},
        "contexts": {"short": 16},
        "concurrency": [1],
        "cell": {"n_predict": 64, "single_stream_requests": 3, "single_stream_seconds": 0,
                 "paired": {"rounds": rounds, "requests": 1, "contexts": ["short"]}},
        "link_check": {"iperf_seconds": 2, "iperf_repeats": 3, "rr_samples": 200},
        "roundtrips": {"workers": [1], "delays_ms": [0.0, 0.5, 1.0], "requests": 3,
                       "models": ["smol"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--dir", help="run here (kept) instead of a temporary directory")
    parser.add_argument("--dry-run", action="store_true",
                        help="only plan the run (checks the config against the workflow)")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="sb-bandwidth-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "Snakefile", work)
    for folder in ("rules", "config", "profiles", "envs", "report"):
        shutil.copytree(ROOT / folder, work / folder, dirs_exist_ok=True)
    (work / "config/reruns.yaml").unlink(missing_ok=True)
    (work / "bandwidth.yaml").write_text(yaml.safe_dump(config(args.rounds), sort_keys=False))
    snakemake = Path(sys.executable).with_name("snakemake")
    argv = [str(snakemake), "--cores", "1", "all", "--configfile", "bandwidth.yaml",
            "--replace-workflow-config"]
    if args.dry_run:
        plan = subprocess.run([*argv, "-n", "--quiet", "rules"], cwd=work)
        print(f"planned (dry run, exit {plan.returncode}) in {work}")
        sys.exit(plan.returncode)
    run = subprocess.run(argv, cwd=work)
    if run.returncode != 0:
        print(f"the workflow failed (exit {run.returncode}); see {work}/results/logs")
    table = pd.read_csv(work / "results/tables/link_comparison.csv")
    links = pd.read_csv(work / "results/tables/links.csv")
    print(links[["link", "A→B", "B→A"]].to_string(index=False))
    print(table[["link", "compared", "decode base (ms/token)", "decode Δ (ms/token)",
                 "predicted Δ (ms/token)", "measured vs predicted"]].to_string(index=False))
    traffic = pd.read_csv(work / "results/tables/link_traffic.csv")
    print(traffic[["link", "B→A (B/token)", "B→A check", "transfer (ms/token)"]]
          .to_string(index=False))
    print(f"results in {work}")


if __name__ == "__main__":
    main()
