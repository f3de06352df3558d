"""Peak RSS of one rewrite task on S3 against the fragments it reads, without Spark: the task
(``run_rewrite``, prefetch on) runs in a fresh Python process per size, its RSS sampled every
20 ms (with Arrow's and glibc's counts: what is live and what the heap holds; and what the
prefetch and the upload's part bodies hold), optionally with tracemalloc's biggest holders at
the traced peak.

    python bench/rewrite_rss_profile.py [--fragments 50 500 1000] [--latency 20] [--trace]

Datasets: ``cluster_s3_bench``'s (N fragments x 10 000 rows, ~0.8 MB a fragment, cached under
``--cache``), uploaded to ``moto_server`` behind the latency proxy. Reported per N: the
process's RSS before the task, its peak, Arrow's peak allocation and the task's seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CHILD = r'''
import json, os, sys, threading, time
uri, opts, trace = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
import pyarrow as pa
from lance_spark_ops.spark.files.rewrite_tasks import RewriteSpec, run_rewrite
from lance_spark_ops.spark.runtime.tuning import DEFAULT_TUNING
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.io import prefetch as _prefetch

_made = []  # the task's prefetchers: what they held at most, fetched and served
_init = _prefetch.Prefetcher.__init__
def _record(self, *a, **k):
    _init(self, *a, **k)
    _made.append(self)
_prefetch.Prefetcher.__init__ = _record

from lance_spark_ops.io import obstore_writes as _writes
_uploads = []  # the task's obstore uploads: the part bodies they hold (in flight, not let go)
_uinit = _writes.ObstoreUpload.__init__
def _record_upload(self, *a, **k):
    _uinit(self, *a, **k)
    _uploads.append(self)
_writes.ObstoreUpload.__init__ = _record_upload

def holders():
    """Bytes the prefetch holds (fetched or in flight) and the uploads' part bodies not let go."""
    bodies = 0
    for u in list(_uploads):
        held = list(u._bodies)
        bodies += sum(len(b) for i, b in enumerate(held) if not _writes._released(held, i))
    return sum(p._bytes for p in _made), bodies

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

ds = Dataset.open(uri, storage_options=opts)
ids = tuple(f.id for f in ds.fragments)
spec = RewriteSpec(ds.uri, ds.version, ids, "2.1", 10**12, storage_options=opts,
                   manifest_slice=ds.fragment_slice(ids, DEFAULT_TUNING.fragment_chunk))
del ds
base, samples, snap, done = rss(), [], [], threading.Event()
if trace:
    import tracemalloc
    tracemalloc.start(1)

from lance_spark_ops._heap import _mallinfo2

def heap():
    info = _mallinfo2()  # glibc's: bytes in use, bytes held from the OS (arenas and mmaps)
    return (0, 0) if info is None else (info.uordblks + info.hblkhd, info.arena + info.hblkhd)

def sample():
    best = 0
    while not done.wait(0.02):
        samples.append((rss(), pa.total_allocated_bytes(), *heap(), *holders()))
        if trace:
            cur = tracemalloc.get_traced_memory()[0]
            if cur > best * 1.15:
                best, snap[:] = cur, [tracemalloc.take_snapshot()]

th = threading.Thread(target=sample, daemon=True)
th.start()
t0 = time.perf_counter()
run_rewrite(spec, TaskContext("rss", 0, "0"))
took = time.perf_counter() - t0
done.set()
th.join()
at_peak = max(samples)
out = {"base_mib": base / 2**20, "peak_mib": at_peak[0] / 2**20,
       "arrow_peak_mib": max(s[1] for s in samples) / 2**20, "seconds": took,
       # at the RSS peak: Arrow's live bytes, glibc's bytes in use and held (all threads' arenas)
       "at_peak_mib": {"arrow": at_peak[1] / 2**20, "glibc_in_use": at_peak[2] / 2**20,
                       "glibc_held": at_peak[3] / 2**20, "prefetch": at_peak[4] / 2**20,
                       "upload_bodies": at_peak[5] / 2**20},
       "glibc_in_use_peak_mib": max(s[2] for s in samples) / 2**20,
       "prefetch": [{"peak_mib": p.peak_bytes / 2**20, "fetched": p.fetched, "hits": p.hits}
                    for p in _made]}
if snap:
    out["top"] = [(str(x.traceback[0]), round(x.size / 2**20, 1)) for x in snap[0].statistics("lineno")[:12]]
print(json.dumps(out))
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fragments", type=int, nargs="+", default=[50, 500, 1000])
    ap.add_argument("--latency", type=float, default=20)
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--cache", default="/tmp/lso-bench-rss")
    ap.add_argument("--out", default=None)
    ap.add_argument("--store", choices=("moto", "lean"), default="moto",
                    help="moto behind the latency proxy, or tests.support.lean_s3")
    args = ap.parse_args()
    import boto3
    from cluster_s3_bench import rss_dataset
    from object_store_bench import upload

    from tests.support.latency_store import MotoServer, ProxyProcess, create_bucket, s3_options
    from tests.support.lean_s3 import LeanS3Process

    result: dict = {"latency_ms": args.latency, "io_max_bytes": os.environ.get("LSO_IO_MAX_BYTES"),
                    "store": args.store, "rss": {}}
    with contextlib.ExitStack() as stack:
        if args.store == "lean":
            lean = stack.enter_context(LeanS3Process(delay_ms=args.latency))
            direct, delayed = lean.direct, lean.endpoint
        else:
            moto = stack.enter_context(MotoServer())
            direct = moto.endpoint
            delayed = stack.enter_context(ProxyProcess(moto.endpoint, delay_ms=args.latency)).endpoint
        client = boto3.client("s3", endpoint_url=direct, aws_access_key_id="testing",
                              aws_secret_access_key="testing-secret", region_name="us-east-1")
        for n in args.fragments:
            local = Path(f"{args.cache}-{n}")
            rss_dataset(local, n)
            bucket = f"rss-{n}-{uuid.uuid4().hex[:8]}"
            create_bucket(direct, bucket)
            upload(client, local, bucket, "ds.lance")
            p = subprocess.run([sys.executable, "-c", CHILD, f"s3://{bucket}/ds.lance",
                                json.dumps(s3_options(delayed)), "1" if args.trace else "0"],
                               capture_output=True, text=True, check=False,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
            if p.returncode:
                raise SystemExit(p.stderr[-3000:])
            got = json.loads(p.stdout.strip().splitlines()[-1])
            result["rss"][str(n)] = got
            print(n, json.dumps(got), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
