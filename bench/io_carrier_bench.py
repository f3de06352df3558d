"""Which library carries object-store reads: fsspec's async API (s3fs on aiobotocore, as
``io.remote`` uses it) against obstore (the Rust object_store crate pylance uses), on the
latency store, per request latency.

    python bench/io_carrier_bench.py [--latencies 0 20 50] [--objects 48] [--size 1300000] [--rounds 5]
        [--upload-mib 60]

Each round fetches ``--objects`` objects of ``--size`` bytes, whole and as 8 ranged reads each,
all in flight together (at most 32 at a time, as ``io.budget``'s default), with each library
from a fresh event-loop task, and uploads one object of ``--upload-mib`` MiB in 1 MiB writes
through ``ObjectStore.open_output`` with each carrier (``io.remote.S3Upload`` on s3fs,
``io.obstore_writes.ObstoreUpload``); wall time and this process's CPU time are reported
(medians). obstore is in the ``s3`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.latency_store import MotoServer, ProxyProcess, create_bucket, s3_options  # noqa: E402

LIMIT = 32


async def _bounded(coros):
    sem = asyncio.Semaphore(LIMIT)

    async def one(c):
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latencies", type=float, nargs="+", default=[0, 20, 50])
    ap.add_argument("--objects", type=int, default=48)
    ap.add_argument("--size", type=int, default=1_300_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--upload-mib", type=int, default=60)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "io_carrier_bench.json"))
    args = ap.parse_args()
    import os

    import boto3
    import obstore
    from fsspec.asyn import sync
    from obstore.store import S3Store

    from lance_spark_ops.io.storage import ObjectStore

    with MotoServer() as moto, ProxyProcess(moto.endpoint) as proxy:
        create_bucket(moto.endpoint, "carrier")
        client = boto3.client("s3", endpoint_url=moto.endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing-secret", region_name="us-east-1")
        body = bytes(range(256)) * (args.size // 256 + 1)
        keys = [f"obj/{i:04d}" for i in range(args.objects)]
        for k in keys:
            client.put_object(Bucket="carrier", Key=k, Body=body[:args.size])
        fs = ObjectStore("s3://carrier", s3_options(proxy.endpoint)).fs
        ob = S3Store("carrier", endpoint=proxy.endpoint, access_key_id="testing",
                     secret_access_key="testing-secret", region="us-east-1",
                     client_options={"allow_http": True})
        part = args.size // 8
        spans = [(s, min(s + part, args.size)) for s in range(0, args.size, part)]

        async def fsspec_whole():
            return await _bounded([fs._cat_file(f"carrier/{k}", max_concurrency=1) for k in keys])

        async def fsspec_ranges():
            return await _bounded([fs._cat_file(f"carrier/{k}", start=s, end=e)
                                   for k in keys for s, e in spans])

        async def obstore_whole():
            async def one(k):
                r = await obstore.get_async(ob, k)
                return await r.bytes_async()
            return await _bounded([one(k) for k in keys])

        async def obstore_ranges():
            return await _bounded([obstore.get_range_async(ob, k, start=s, end=e)
                                   for k in keys for s, e in spans])

        store = ObjectStore("s3://carrier/up", s3_options(proxy.endpoint))
        upload = bytes(range(256)) * (args.upload_mib << 12)

        def upload_with(carrier: str):
            def run():
                os.environ["LSO_IO_CARRIER"] = carrier
                try:
                    with store.open_output(f"{carrier}.bin") as out:
                        for i in range(0, len(upload), 1 << 20):
                            out.write(upload[i:i + (1 << 20)])
                finally:
                    os.environ.pop("LSO_IO_CARRIER")
                return [b"x" * store.size(f"{carrier}.bin")]
            return run

        cases = {"fsspec_whole": lambda: sync(fs.loop, fsspec_whole),
                 "fsspec_ranges": lambda: sync(fs.loop, fsspec_ranges),
                 "obstore_whole": lambda: asyncio.run(obstore_whole()),
                 "obstore_ranges": lambda: asyncio.run(obstore_ranges()),
                 "upload_s3fs": upload_with("fsspec"), "upload_obstore": upload_with("obstore")}
        for fn in cases.values():  # connections and clients warmed up
            fn()
        result: dict = {"objects": args.objects, "size": args.size, "ranges_per_object": len(spans),
                        "in_flight": LIMIT, "median": {}}
        for latency in args.latencies:
            proxy.configure(delay_ms=latency)
            wall: dict = {k: [] for k in cases}
            cpu: dict = {k: [] for k in cases}
            for r in range(args.rounds):
                order = list(cases) if r % 2 == 0 else list(reversed(cases))
                for name in order:
                    c0, t0 = time.process_time(), time.perf_counter()
                    got = cases[name]()
                    wall[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.process_time() - c0)
                    want = len(upload) if name.startswith("upload") else args.objects * args.size
                    assert sum(len(bytes(g)) for g in got) == want
            med = {k: {"wall": statistics.median(wall[k]), "cpu": statistics.median(cpu[k])} for k in cases}
            result["median"][str(int(latency))] = med
            for k, v in med.items():
                print(f"{latency:>3.0f} ms {k:15s} wall {v['wall']:.3f} s  cpu {v['cpu']:.3f} s", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
