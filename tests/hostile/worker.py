"""Subprocess that runs mutation cases under an address-space cap, one JSON line per case.

    python -m tests.hostile.worker CORPUS WORK CASES.json START END MEM_MB

Before each case it prints ``{"i": n, "start": true}`` so that the parent can name the case
a crash or a hang happened in.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def warm(corpus: Path) -> None:
    """Read every dataset once unmutated: imports, pools and caches exist before the cap."""
    from lance_spark_ops.table.dataset import Dataset

    for ds in sorted(p for p in corpus.iterdir() if p.is_dir()):
        Dataset.open(str(ds)).to_table(with_row_id=True)


def _allocation_failed(e: BaseException) -> bool:
    import pyarrow as pa

    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, (MemoryError, pa.ArrowMemoryError)):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def main() -> None:
    corpus, work, cases_file, start, end, mem_mb = sys.argv[1:7]
    from lance_spark_ops.errors import LanceError
    from tests.hostile.mutate import Case, run_case

    all_cases = [Case(**c) for c in json.loads(Path(cases_file).read_text())]
    # warm up imports and thread pools on an unmutated read, then cap what is left
    warm(Path(corpus))
    limit = _vm_size() + int(mem_mb) * (1 << 20)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for i in range(int(start), int(end)):
        case = all_cases[i]
        print(json.dumps({"i": i, "start": True}), flush=True)
        t0 = time.monotonic()
        status, etype, msg, named = "ok", "", "", True
        try:
            run_case(case, Path(corpus), Path(work))
        except LanceError as e:
            status, etype, msg = "lance", type(e).__name__, str(e)[:500]
            named = e.path is not None
            if _allocation_failed(e):  # converted, but it asked for more memory than the cap
                status = "escape"
        except BaseException as e:  # noqa: BLE001 - every other exception is what we look for
            status, etype, msg = "escape", type(e).__name__, str(e)[:500]
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss) >> 10
        if grown > int(mem_mb) // 2:  # resident peak rose by more than half the cap: it materialised it
            status, msg = "escape", f"peak RSS grew by {grown} MiB ({etype}: {msg})"
        print(json.dumps({"i": i, "status": status, "type": etype, "msg": msg, "named": named,
                          "sec": round(time.monotonic() - t0, 3)}), flush=True)


if __name__ == "__main__":
    main()
