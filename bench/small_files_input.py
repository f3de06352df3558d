"""Inputs for ``small_files_bench.py`` at fragment counts pylance cannot write in minutes
(1 000 000 fragments of 2 rows): still pylance-made, file for file.

pylance writes ``templates`` distinct tiny fragments (``write_dataset`` with
``max_rows_per_file=rows``, file version 2.2); each is then hard-linked under new names until
there are ``fragments`` data files (byte-identical pylance files), and pylance commits one
``LanceOperation.Overwrite`` whose fragments are those files (pylance gives them their ids).
The rows repeat every ``templates * rows`` ids. ``link_copy`` copies such a dataset in
seconds: data files are immutable, so a copy may share them (hard links); the rest is copied.

    python bench/small_files_input.py OUT_URI FRAGMENTS ROWS [--templates 1000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa


def build(uri: str, fragments: int, rows: int, templates: int = 1000) -> None:
    """A dataset at ``uri`` (a new local directory) of ``fragments`` fragments of ``rows`` rows,
    columns ``id`` (int64) and ``x`` (float64), committed by pylance in one Overwrite."""
    import lance
    from lance.fragment import DataFile, FragmentMetadata

    k = min(templates, fragments)
    with tempfile.TemporaryDirectory(dir=Path(uri).parent) as tmp:
        src = f"{tmp}/templates.lance"
        n = k * rows
        table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                          "x": pa.array(np.random.default_rng(0).random(n))})
        lance.write_dataset(table, src, data_storage_version="2.2", max_rows_per_file=rows,
                            max_rows_per_group=rows)
        tds = lance.dataset(src)
        shapes = [f.metadata.data_files()[0] for f in tds.get_fragments()]
        if len(shapes) != k or any(f.physical_rows != rows for f in tds.get_fragments()):
            raise RuntimeError(f"pylance wrote {len(shapes)} template fragments, wanted {k} of {rows} rows")
        data = f"{uri}/data"
        os.makedirs(data)
        stem = uuid.uuid4().hex[:24]
        # (file, fields, columns, major, minor, size) of each template, read once
        shapes = [(f"{src}/data/{t.path}", list(t.fields), list(t.column_indices), t.file_major_version,
                   t.file_minor_version, t.file_size_bytes) for t in shapes]
        frags = []
        for i in range(fragments):
            path, fields, columns, major, minor, size = shapes[i % k]
            name = f"{stem}{i:08d}.lance"
            os.link(path, f"{data}/{name}")
            frags.append(FragmentMetadata(id=i, files=[DataFile(name, fields, columns, major, minor, size)],
                                          physical_rows=rows))
        schema = tds.schema
    op = lance.LanceOperation.Overwrite(schema, frags)
    ds = lance.LanceDataset.commit(uri, op)
    got = lance.dataset(uri)
    if len(got.get_fragments()) != fragments or got.count_rows() != fragments * rows:
        raise RuntimeError(f"pylance reads {got.count_rows()} rows in {len(got.get_fragments())} fragments "
                           f"at {uri}, wanted {fragments} x {rows}")
    del ds


def link_copy(src: str, dst: str) -> None:
    """A copy of the local dataset ``src`` at ``dst`` sharing its data files (hard links,
    ``cp -al``); manifests, transactions and deletion files are copied."""
    os.makedirs(dst)
    for entry in os.scandir(src):
        if entry.name == "data":
            subprocess.run(["cp", "-al", entry.path, f"{dst}/data"], check=True)
        elif entry.is_dir():
            shutil.copytree(entry.path, f"{dst}/{entry.name}")
        else:
            shutil.copy2(entry.path, f"{dst}/{entry.name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("fragments", type=int)
    ap.add_argument("rows", type=int)
    ap.add_argument("--templates", type=int, default=1000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    build(args.uri, args.fragments, args.rows, args.templates)
    print(f"built {args.fragments} x {args.rows} in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
