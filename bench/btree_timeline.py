"""A timeline of one BTREE (or ``--index INVERTED``) build on S3 at a request latency, ours and
pylance's, from the latency proxy's request log (issue #39): each request's operation, key and
start / end, relative to the call, plus our job's phases. Which requests wait on others is read off it.

    python bench/btree_timeline.py [--latency 20] [--side ours pylance] [--index BTREE|INVERTED]
        [--store s3|azure] [--rounds 1] [--out /tmp/t.json]

The dataset is ``object_store_bench``'s (48 fragments x 20 000 rows, a sixth deleted); one
untimed build on each side first warms imports, clients and Spark workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.bench_stores import STORES  # noqa: E402
from bench.object_store_bench import build  # noqa: E402


def _short(path: str) -> str:
    parts = path.split("/")
    if "_indices" in parts:
        return "_indices/.../" + parts[-1]
    if "data" in parts:
        return "data/" + parts[-1][:8]
    return "/".join(parts[3:]) or path


def show(log: list, t0: float, t1: float) -> None:
    for op, path, rng, start, end in sorted(log, key=lambda e: e[3]):
        end = end or start
        print(f"  {1000 * (start - t0):8.1f} {1000 * (end - t0):8.1f} ms  {op:12s} {_short(path)[:60]:60s} "
              f"{rng}")
    print(f"  total {1000 * (t1 - t0):.1f} ms, {len(log)} requests")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=20)
    ap.add_argument("--side", nargs="+", default=["ours", "pylance"])
    ap.add_argument("--index", choices=("BTREE", "INVERTED"), default="BTREE",
                    help="BTREE on the int64 column or INVERTED on the string one")
    ap.add_argument("--store", choices=sorted(STORES), default="s3")
    ap.add_argument("--rounds", type=int, default=1, help="timed builds of each side, alternating")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    column = "id" if args.index == "BTREE" else "s"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from lance_spark_ops.spark import create_index
    from lance_spark_ops.spark.runtime.session import get_spark

    out: dict = {}
    with STORES[args.store]() as store:
        proxy, via = store.proxy, store.via
        store.bucket("tl-src")
        build(store.uri("tl-src", "ds.lance"), store.direct)
        spark = get_spark("btree-timeline")

        def fresh() -> str:
            bucket = store.bucket()
            store.copy("tl-src", "ds.lance", bucket, "ds.lance")
            return store.uri(bucket, "ds.lance")

        def run(side: str, uri: str):
            if side == "ours":
                return create_index(spark, uri, column, args.index, storage_options=via)
            import lance

            lance.dataset(uri, storage_options=via).create_scalar_index(column, args.index)
            return None

        proxy.configure(delay_ms=args.latency)
        for side in args.side:
            run(side, fresh())  # warm
        for r in range(args.rounds):
            for side in args.side if r % 2 == 0 else args.side[::-1]:
                uri = fresh()
                proxy.reset()
                proxy.configure(log=True)
                t0 = time.time()
                m = run(side, uri)
                t1 = time.time()
                proxy.configure(log=False)
                log = proxy.stats()["timeline"]
                print(f"{side} round {r + 1}: {t1 - t0:.3f} s", flush=True)
                if m is not None:
                    print(f"  phases: {m.seconds}")
                show(log, t0, t1)
                timeline = [[op, p, rg, s - t0, (e or s) - t0] for op, p, rg, s, e in log]
                out.setdefault(side, []).append({"seconds": t1 - t0, "timeline": timeline,
                                                 "phases": None if m is None else m.seconds})
        spark.stop()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
