"""What the manifest validation costs a job at scale (issue #34: "cheap").

    python bench/validate_bench.py [--fragments 100000] [--rounds 5]

Builds a many-fragment dataset as ``driver_bench`` does, then times, in alternating rounds:
``Dataset.open`` alone; ``open`` + the plan step's check (``check_consistent``, from the fragment
columns: what every rewrite pays); the commit's check of the previous manifest
(``manifest_findings(deep=False)`` on an opened manifest); and the deep check of the validate
job's driver (file lists, row ids; objects built). Prints medians as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from driver_bench import build_dataset  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fragments", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from lance_spark_ops.table.dataset import Dataset
    from lance_spark_ops.table.validate import manifest_findings

    with tempfile.TemporaryDirectory() as tmp:
        uri = f"{tmp}/ds.lance"
        build_dataset(uri, args.fragments, 20, 10_000)
        times: dict[str, list[float]] = {"open": [], "open_and_plan_check": [], "commit_check": [],
                                         "deep_check": []}
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            Dataset.open(uri)
            times["open"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ds = Dataset.open(uri)
            ds.check_consistent("bench")
            times["open_and_plan_check"].append(time.perf_counter() - t0)
            ds = Dataset.open(uri)
            t0 = time.perf_counter()
            manifest_findings(ds.manifest, deep=False)
            times["commit_check"].append(time.perf_counter() - t0)
            ds = Dataset.open(uri)
            t0 = time.perf_counter()
            found = ds.findings(deep=True)
            times["deep_check"].append(time.perf_counter() - t0)
        out = {k: round(statistics.median(v), 4) for k, v in times.items()}
        out.update(fragments=args.fragments, rounds=args.rounds, deep_findings=len(found))
        print(json.dumps(out))


if __name__ == "__main__":
    main()
