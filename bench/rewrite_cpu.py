"""CPU time of a re-encode compaction in this process (no Spark) against pylance
``compact_files(num_threads=2)``, interleaved rounds, with our time split by phase.

    python bench/rewrite_cpu.py [--gb 0.3] [--fragments 60] [--shape mixed] [--rounds 3]

The dataset is ``compact_bench.make_dataset`` (``--shape mixed|strings|lists``). Each round
copies it twice and compacts one copy with pylance and the other with
``compact(None, ...)`` (tasks run one after another in this process), alternating which
goes first. CPU time is ``time.process_time()`` (all threads of the process, so pylance's
two threads count). Our phases: read+decode (inside ``Dataset.scan_fragment``), encode
(``LanceFileWriter._encode``), write (the container's page writes and file close, minus
encoding done there), other (buffering, concatenation, manifests, commit).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from compact_bench import SHAPES, dir_bytes, make_dataset  # noqa: E402


@contextlib.contextmanager
def phase_timer() -> Iterator[dict[str, float]]:
    """Patch the reader, encoder and container to accumulate CPU seconds per phase."""
    import lance_spark_ops.file.read_together as together
    from lance_spark_ops.file.container_writer import ContainerWriter
    from lance_spark_ops.file.writer import LanceFileWriter
    from lance_spark_ops.table.dataset import Dataset

    acc: dict[str, float] = defaultdict(float)
    scan, encode, page, finish = (Dataset.scan_fragment, LanceFileWriter._encode,
                                  ContainerWriter.write_encoded_page, ContainerWriter.finish)
    fscan, read_many = Dataset.fragment_scan, together.read_files_together
    inside: set[str] = set()  # phases being timed (scan_fragment calls fragment_scan: count once)

    def timed(name: str, fn):  # noqa: ANN001, ANN202
        def wrapper(*a, **k):  # noqa: ANN002, ANN003, ANN202
            if name in inside:
                return fn(*a, **k)
            inside.add(name)
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                acc[name] += time.process_time() - t0
                inside.discard(name)
        return wrapper

    def timed_scan(*a, **k):  # noqa: ANN002, ANN003, ANN202
        it = scan(*a, **k)
        while True:
            inside.add("read+decode")
            t0 = time.process_time()
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                acc["read+decode"] += time.process_time() - t0
                inside.discard("read+decode")
            yield batch

    Dataset.scan_fragment = timed_scan
    Dataset.fragment_scan = timed("read+decode", fscan)  # runs of small fragments (tasks.rewrite)
    together.read_files_together = timed("read+decode", read_many)
    LanceFileWriter._encode = timed("encode", encode)
    ContainerWriter.write_encoded_page = timed("write", page)
    ContainerWriter.finish = timed("write", finish)
    try:
        yield acc
    finally:
        Dataset.scan_fragment, LanceFileWriter._encode = scan, encode
        Dataset.fragment_scan, together.read_files_together = fscan, read_many
        ContainerWriter.write_encoded_page, ContainerWriter.finish = page, finish


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=0.3)
    ap.add_argument("--fragments", type=int, default=60)
    ap.add_argument("--version", default="2.2")
    ap.add_argument("--shape", choices=SHAPES, default="mixed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target-rows", type=int, default=1024 * 1024)
    ap.add_argument("--mode", choices=("reencode", "try_binary_copy", "force_binary_copy"),
                    default="reencode")
    ap.add_argument("--deleted", type=float, default=0.1, help="fraction of rows deleted after writing")
    ap.add_argument("--src", help="keep the generated dataset here and reuse it when it exists")
    ap.add_argument("--profile", help="also write a cProfile of one of our runs to this path")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import lance

    from lance_spark_ops.spark.files.compaction import compact

    with tempfile.TemporaryDirectory() as tmp:
        src = args.src or f"{tmp}/src.lance"
        if Path(src).exists():
            rows = lance.dataset(src).count_rows()
        else:
            rows = make_dataset(src, args.gb, args.fragments, args.version, shape=args.shape,
                                deleted=args.deleted)
        size = dir_bytes(src)
        print(f"{args.shape}: {rows} rows, {size / 1e9:.2f} GB, {args.fragments} fragments", flush=True)

        def ours(uri: str) -> None:
            compact(None, uri, target_rows_per_fragment=args.target_rows, compaction_mode=args.mode)

        def theirs(uri: str) -> None:
            lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=args.target_rows,
                                                      num_threads=2)

        cpu: dict[str, list[float]] = {"ours": [], "pylance": []}
        phases: list[dict[str, float]] = []
        for r in range(args.rounds):
            order = [("ours", ours), ("pylance", theirs)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                uri = f"{tmp}/{name}.lance"
                shutil.copytree(src, uri)
                with phase_timer() if name == "ours" else contextlib.nullcontext({}) as acc:
                    t0 = time.process_time()
                    fn(uri)
                    cpu[name].append(time.process_time() - t0)
                if name == "ours":
                    phases.append(dict(acc, other=cpu[name][-1] - sum(acc.values())))
                shutil.rmtree(uri)
        if args.profile:
            import cProfile

            uri = f"{tmp}/prof.lance"
            shutil.copytree(src, uri)
            prof = cProfile.Profile(time.process_time)  # CPU seconds, not wall
            prof.runcall(ours, uri)
            prof.dump_stats(args.profile)
        o, p = statistics.median(cpu["ours"]), statistics.median(cpu["pylance"])
        split = {k: round(statistics.median(ph.get(k, 0.0) for ph in phases), 3)
                 for k in ("read+decode", "encode", "write", "other")}
        result = {"shape": args.shape, "mode": args.mode, "rows": rows, "bytes": size,
                  "version": args.version,
                  "ours_cpu_s": round(o, 3), "pylance_cpu_s": round(p, 3),
                  "ours_over_pylance": round(o / p, 3),
                  "ours_split_cpu_s": split, "rounds": {k: [round(x, 3) for x in v] for k, v in cpu.items()}}
        print(json.dumps(result), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
