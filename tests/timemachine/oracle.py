"""pylance 14's answers for a time-machine dataset, and the same questions asked of this library:
every version's scan (with row ids and addresses), a projection, row counts, and what each index
answers (a filter per scalar index, a nearest-neighbour query per vector index)."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import LanceError
from lance_spark_ops.table.dataset import Dataset
from tests.support.pylance_indices import index_segments

# versions pylance 14 itself cannot scan (nothing to compare ours with); reported by the tests
PYLANCE_FAILS: list[str] = []
FILTERS = {"BTREE": "id < 120 OR id = 777", "BITMAP": "s = 's5'",
           "LABEL_LIST": "array_has_any(labels, ['l2'])"}


class PylanceCannotRead(Exception):
    """pylance 14 itself fails to scan the dataset's latest version."""


def _projection(schema: pa.Schema) -> list[str]:
    return [n for n in ("s", "id") if n in schema.names] or schema.names[:1]


def read_mismatches(uri: str) -> list[str]:
    """Every version: our scans against pylance 14's; returns what differs (empty = same)."""
    out = []
    for v in Dataset.open(uri).versions():  # pylance 14 cannot open some (a 0.16 dataset mixing v1 and v2)
        try:
            theirs_ds = lance.dataset(uri, version=v)
            theirs = theirs_ds.to_table(with_row_id=True, with_row_address=True)
        except Exception as e:  # noqa: BLE001 - pylance 14 cannot read some old versions
            try:
                Dataset.open(uri, v).to_table(with_row_id=True)
                ours_says = "we read it (nothing to compare with)"
            except LanceError as ours_e:
                ours_says = f"we refuse: {type(ours_e).__name__}"
            PYLANCE_FAILS.append(f"{uri} v{v}: pylance 14: {str(e).splitlines()[0][:160]}; {ours_says}")
            continue
        ours_ds = Dataset.open(uri, v)
        ours = ours_ds.to_table(with_row_id=True, with_row_address=True)
        if not ours.equals(theirs):
            out.append(f"v{v}: scan with row ids differs ({ours.num_rows} vs {theirs.num_rows} rows)")
        cols = _projection(theirs_ds.schema)
        if not ours_ds.to_table(columns=cols).equals(theirs_ds.to_table(columns=cols)):
            out.append(f"v{v}: projection {cols} differs")
        if ours_ds.count_rows() != theirs_ds.count_rows():
            out.append(f"v{v}: count_rows {ours_ds.count_rows()} vs {theirs_ds.count_rows()}")
    return out


def answers(uri: str) -> dict:
    """pylance 14's answers at the latest version: rows sorted by id, and per index its query's ids."""
    try:
        ds = lance.dataset(uri)
        rows = ds.to_table()
    except Exception as e:  # noqa: BLE001 - pylance 14 cannot read it: no answers to keep
        raise PylanceCannotRead(f"{uri}: {str(e).splitlines()[0][:200]}") from e
    rows = rows.sort_by("id") if "id" in rows.schema.names else rows
    out = {"rows": rows, "indices": {}}
    try:
        listed = index_segments(ds)
    except Exception as e:  # noqa: BLE001 - pylance 14 describes no index of pylance <= 0.7 before a write
        PYLANCE_FAILS.append(f"{uri} list_indices: pylance 14: {str(e).splitlines()[0][:160]}")
        listed = []
    for idx in listed:
        if not idx["fields"] or idx["name"].startswith("__"):
            continue  # system indices (the fragment reuse index) answer no query
        kind = str(idx.get("type", ""))
        name, field = idx["name"], idx["fields"][0]
        if field == "vec":
            q = np.linspace(-1, 1, 8, dtype=np.float32)
            try:
                got = ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 2}, columns=["id"])
            except Exception as e:  # noqa: BLE001 - pylance 14 cannot query some old vector indices
                PYLANCE_FAILS.append(f"{uri} index {name}: pylance 14: {str(e).splitlines()[0][:160]}")
                continue
            out["indices"][name] = sorted(got["id"].to_pylist())
        elif kind.upper() == "INVERTED":
            try:
                got = ds.to_table(full_text_query={"query": "s5", "columns": [field]}, columns=["id"])
            except Exception as e:  # noqa: BLE001 - pylance 14 cannot query some old FTS indices
                PYLANCE_FAILS.append(f"{uri} index {name}: pylance 14: {str(e).splitlines()[0][:160]}")
                continue
            out["indices"][name] = sorted(got["id"].to_pylist())
        else:
            by_field = {"id": "BTREE", "s": "BITMAP", "labels": "LABEL_LIST"}.get(field, "")
            flt = FILTERS.get(kind.upper()) or FILTERS.get(by_field)
            if flt is None:
                continue
            got = ds.to_table(filter=flt, columns=["id"])
            out["indices"][name] = sorted(got["id"].to_pylist())
    return out


def same_answers(before: dict, uri: str) -> list[str]:
    """What pylance 14 answers differently at ``uri`` than ``before``."""
    now = answers(uri)
    out = []
    if not now["rows"].equals(before["rows"]):
        out.append(f"rows differ ({now['rows'].num_rows} vs {before['rows'].num_rows})")
    for name, ids in before["indices"].items():
        if name not in now["indices"]:
            out.append(f"index {name} gone")
        elif now["indices"][name] != ids:
            out.append(f"index {name} answers differently")
    return out


def live_ids(uri: str) -> np.ndarray:
    return np.sort(pc.cast(lance.dataset(uri).to_table(columns=["id"])["id"], pa.int64()).to_numpy())
