"""A timeline of one BTREE (or ``--index INVERTED``) build on S3 at a request latency, ours and
pylance's, from the latency proxy's request log (issue #39): each request's operation, key and
start / end, relative to the call, plus our job's phases. Which requests wait on others is read off it.

    python bench/btree_timeline.py [--latency 20] [--side ours pylance] [--index BTREE|INVERTED]
        [--out /tmp/t.json]

The dataset is ``object_store_bench``'s (48 fragments x 20 000 rows, a sixth deleted); one
untimed build on each side first warms imports, clients and Spark workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.object_store_bench import build, copy_prefix  # noqa: E402
from tests.support.latency_store import MotoServer, ProxyProcess, create_bucket, s3_options  # noqa: E402


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
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    column = "id" if args.index == "BTREE" else "s"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import boto3

    from lance_spark_ops.spark import create_index
    from lance_spark_ops.spark.runtime.session import get_spark

    out = {}
    with MotoServer() as moto, ProxyProcess(moto.endpoint) as proxy:
        client = boto3.client("s3", endpoint_url=moto.endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing-secret", region_name="us-east-1")
        create_bucket(moto.endpoint, "tl-src")
        direct, via = s3_options(moto.endpoint), s3_options(proxy.endpoint)
        build("s3://tl-src/ds.lance", direct)
        spark = get_spark("btree-timeline")

        def fresh() -> str:
            bucket = f"tl-{uuid.uuid4().hex[:12]}"
            create_bucket(moto.endpoint, bucket)
            copy_prefix(client, "tl-src", "ds.lance", bucket, "ds.lance")
            return f"s3://{bucket}/ds.lance"

        def run(side: str, uri: str):
            if side == "ours":
                return create_index(spark, uri, column, args.index, storage_options=via)
            import lance

            lance.dataset(uri, storage_options=via).create_scalar_index(column, args.index)
            return None

        proxy.configure(delay_ms=args.latency)
        for side in args.side:
            run(side, fresh())  # warm
        for side in args.side:
            uri = fresh()
            proxy.reset()
            proxy.configure(log=True)
            t0 = time.time()
            m = run(side, uri)
            t1 = time.time()
            proxy.configure(log=False)
            log = proxy.stats()["timeline"]
            print(f"{side}: {t1 - t0:.3f} s", flush=True)
            if m is not None:
                print(f"  phases: {m.seconds}")
            show(log, t0, t1)
            out[side] = {"seconds": t1 - t0, "timeline": [[op, p, r, s - t0, (e or s) - t0]
                                                          for op, p, r, s, e in log],
                         "phases": None if m is None else m.seconds}
        spark.stop()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
