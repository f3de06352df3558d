"""A timeline of one compaction on S3 at a real request latency: the driver's phases, the
rewrite task's start and end in its worker, and every request with its wall-clock times from
the latency proxy's log (issue #39: find the largest cost before cutting it).

    python bench/compact_timeline.py [--latency 20] [--rounds 2] [--mode reencode] [--clean]
        [--pylance] [--local | --driver-bytes N] [--bandwidth-mbps N]

The store and dataset are ``object_store_bench``'s (48 fragments x 20 000 rows, a sixth
deleted; ``--clean``: none deleted, ``binary_clean``'s source, where a binary copy moves pages);
Spark ``local[2]`` warmed as there, every round on a fresh server-side copy. Prints,
per round, the phases and the requests (consecutive requests of one kind and directory in one
line: count, first start, last end, relative to the call) and writes them as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.object_store_bench import CLEAN, TARGET_ROWS, build, copy_prefix, run_side  # noqa: E402
from tests.support.latency_store import MotoServer, ProxyProcess, create_bucket, s3_options  # noqa: E402

STAMPS = Path(tempfile.gettempdir()) / "lso-timeline-stamps"


def traced(spec, ctx):
    """``run_rewrite`` with its start and end written to ``STAMPS`` (the worker's clock = ours)."""
    start = time.time()
    from lance_spark_ops.spark.files.rewrite_tasks import run_rewrite

    out = run_rewrite(spec, ctx)
    STAMPS.mkdir(exist_ok=True)
    (STAMPS / f"{os.getpid()}-{start:.6f}.json").write_text(
        json.dumps({"pid": os.getpid(), "start": start, "end": time.time()}))
    return out


class _Stamps(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.created, record.getMessage()))


def _kind(path: str) -> str:
    parts = path.strip("/").split("/")
    return parts[2] if len(parts) > 3 else parts[-1][:40]


def groups(times: list, t0: float) -> list[dict]:
    """Consecutive requests (by start) of one operation and directory, merged."""
    out: list[dict] = []
    for op, path, _, start, end in sorted(times, key=lambda t: t[3]):
        end = start if end is None else end  # not answered (a fault)
        key = (op, _kind(path))
        if out and out[-1]["key"] == key:
            g = out[-1]
            g["n"] += 1
            g["end"] = max(g["end"], end - t0)
        else:
            out.append({"key": key, "n": 1, "start": start - t0, "end": end - t0})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=20)
    ap.add_argument("--bandwidth-mbps", type=float, default=0.0,
                    help="each connection's rate, MB/s (0: uncapped)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mode", default="reencode")
    ap.add_argument("--clean", action="store_true", help="the dataset without deleted rows")
    ap.add_argument("--pylance", action="store_true", help="a pylance round after each of ours")
    ap.add_argument("--local", action="store_true", help="ours with spark=None (the task in this process)")
    ap.add_argument("--driver-bytes", type=int, default=None,
                    help="Tuning.driver_rewrite_bytes (default: the library's; 0: the task on Spark)")
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "compact_timeline.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from bench.object_store_bench import _import_package
    from lance_spark_ops.spark import compact
    from lance_spark_ops.spark.files import compaction
    from lance_spark_ops.spark.runtime.runner import run_tasks
    from lance_spark_ops.spark.runtime.session import default_parallelism, get_spark
    from lance_spark_ops.spark.runtime.tuning import Tuning

    tuning = Tuning(driver_rewrite_bytes=args.driver_bytes)
    stamps = _Stamps()
    lg = logging.getLogger("lance_spark_ops")
    lg.setLevel(logging.INFO)
    lg.addHandler(stamps)
    compaction.run_rewrite = traced  # the driver hands the task function to Spark by value
    report = []
    with MotoServer() as moto, ProxyProcess(moto.endpoint) as proxy:
        import boto3

        client = boto3.client("s3", endpoint_url=moto.endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing-secret", region_name="us-east-1")
        create_bucket(moto.endpoint, "bench-src")
        direct, via = s3_options(moto.endpoint), s3_options(proxy.endpoint)
        source = CLEAN if args.clean else "ds.lance"
        build(f"s3://bench-src/{source}", direct, delete=not args.clean)
        spark = get_spark("compact-timeline")
        run_tasks(spark, "warm", list(range(default_parallelism(spark))), _import_package)
        for side in ("ours", "pylance"):
            run_side(side, "open", f"s3://bench-src/{source}", via, spark, args)
        proxy.configure(delay_ms=args.latency, log=True, bandwidth_bps=args.bandwidth_mbps * 1e6 or None)
        for r in range(args.rounds):
            for side in ("ours", "pylance") if args.pylance else ("ours",):
                bucket = f"bench-{uuid.uuid4().hex[:12]}"
                create_bucket(moto.endpoint, bucket)
                copy_prefix(client, "bench-src", source, bucket, "ds.lance")
                uri = f"s3://{bucket}/ds.lance"
                for f in STAMPS.glob("*.json"):
                    f.unlink()
                stamps.lines.clear()
                proxy.reset()
                t0 = time.time()
                if side == "ours":
                    m = compact(None if args.local else spark, uri, target_rows_per_fragment=TARGET_ROWS,
                                compaction_mode=args.mode, storage_options=via, tuning=tuning)
                    phases = m.seconds
                else:
                    op = "compact" if args.mode == "reencode" else "binary_clean" if args.clean else "binary"
                    run_side("pylance", op, uri, via, spark, args)
                    phases = {}
                took = time.time() - t0
                st = proxy.stats()
                tasks = [json.loads(f.read_text()) for f in STAMPS.glob("*.json")]
                print(f"\n== {side} round {r + 1}: {took:.2f} s, {st['total']} requests {st['ops']}")
                events = [(c - t0, f"log: {msg}") for c, msg in stamps.lines]
                events += [(t["start"] - t0, f"task start (pid {t['pid']})") for t in tasks]
                events += [(t["end"] - t0, "task end") for t in tasks]
                gs = groups(st["timeline"], t0)
                events += [(g["start"], f"  {g['key'][0]:12s} x{g['n']:<3d} {g['key'][1]:28s} "
                            f"-> {g['end']:6.3f}") for g in gs]
                for at, what in sorted(events):
                    print(f"{at:7.3f}  {what}")
                print(f"phases: {json.dumps({k: round(v, 3) for k, v in phases.items()})}")
                report.append({"side": side, "round": r + 1, "seconds": took, "phases": phases,
                               "tasks": [{k: v - t0 if k != "pid" else v for k, v in t.items()}
                                         for t in tasks],
                               "requests": [{"op": g["key"][0], "what": g["key"][1], "n": g["n"],
                                             "start": g["start"], "end": g["end"]} for g in gs]})
        spark.stop()
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
