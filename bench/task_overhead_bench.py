"""What a Spark task of this library costs beyond its work, on local[2]: the Python worker's
connection to its executor (loopback TCP against a Unix domain socket,
``spark.python.unix.domain.socket.enabled``) and a job of large descriptors in one Spark job
(every task unpickles all of them) against waves of at most ``Tuning.task_inline_bytes``.

    python bench/task_overhead_bench.py [--rounds 3] [--out bench/results/task_overhead_bench.json]

Each setting runs in a fresh session (a child process): no-op tasks (200 of 100 bytes; 400 of
320 KB, 128 MB in all) and a compaction of a local 48-fragment table into 8 tasks (none in the
driver), fresh copy each round; the first round of each is a warm-up, reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, os, shutil, sys, time
sys.path.insert(0, sys.argv[1])
uds, rounds, src = sys.argv[2], int(sys.argv[3]), sys.argv[4]
from lance_spark_ops.spark.runtime.session import get_spark
from lance_spark_ops.spark.runtime.runner import run_tasks
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.runtime.tuning import Tuning

spark = get_spark("task-overhead-bench", conf={"spark.python.unix.domain.socket.enabled": uds,
                                               "spark.ui.enabled": "false"})

def noop(task, ctx):
    return len(task)

def timed(fn):
    out = []
    for _ in range(rounds + 1):  # the first: warm-up
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out

res = {}
tiny, big = [os.urandom(100) for _ in range(200)], [os.urandom(320_000) for _ in range(400)]
res["noop_200_tiny"] = timed(lambda: run_tasks(spark, "b", tiny, noop))
res["noop_400_320kb_one_job"] = timed(lambda: run_tasks(spark, "b", big, noop, inline_bytes=1 << 40))
res["noop_400_320kb_waves"] = timed(lambda: run_tasks(spark, "b", big, noop))  # 8 MiB a Spark job

def one_compaction():
    dst = src + f".copy-{uds}"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    m = compact(spark, dst, target_rows_per_fragment=12_000, tuning=Tuning(driver_rewrite_bytes=0))
    assert m.tasks == 8 and m.tasks_in_driver == 0, m
    shutil.rmtree(dst)

res["compact_8_tasks"] = timed(one_compaction)
print(json.dumps(res))
'''


def source_table(path: Path) -> None:
    """48 fragments x 2 000 rows (int64, float64, short strings), written by pylance."""
    import lance
    import numpy as np
    import pyarrow as pa

    n = 96_000
    t = pa.table({"a": np.arange(n), "b": np.random.default_rng(0).random(n),
                  "s": [f"x{i % 100}" for i in range(n)]})
    lance.write_dataset(t, str(path), max_rows_per_file=2000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cache", default="/tmp/lso-task-overhead")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "task_overhead_bench.json"))
    args = ap.parse_args()
    src = Path(args.cache) / "src.lance"
    if not src.exists():
        source_table(src)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    results: dict[str, dict] = {}
    for uds in ("false", "true", "false", "true"):  # alternating, each a fresh session
        run = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), uds, str(args.rounds), str(src)],
                             capture_output=True, text=True, env=env, timeout=1800, check=True)
        got = json.loads(run.stdout.strip().splitlines()[-1])
        side = results.setdefault("unix_socket" if uds == "true" else "tcp", {})
        for k, v in got.items():
            side.setdefault(k, {"warm_up": [], "seconds": []})
            side[k]["warm_up"].append(round(v[0], 3))
            side[k]["seconds"] += [round(x, 3) for x in v[1:]]
    summary = {side: {k: statistics.median(v["seconds"]) for k, v in r.items()}
               for side, r in results.items()}
    for k in summary["tcp"]:
        print(f"{k:26s} tcp {summary['tcp'][k]:6.2f} s   unix socket {summary['unix_socket'][k]:6.2f} s")
    Path(args.out).write_text(json.dumps({"rounds": args.rounds, "median_seconds": summary, "runs": results},
                                         indent=1) + "\n")


if __name__ == "__main__":
    main()
