"""Manifest files and transactions pylance wrote parse, and serialize back byte for byte;
damaged manifest files raise CorruptFileError; feature flags are checked."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops import CorruptFileError, UnsupportedError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.format import transaction as tx
from lance_spark_ops.table.format.feature_flags import (
    FLAG_DELETION_FILES,
    FLAG_STABLE_ROW_IDS,
    FLAG_TABLE_CONFIG,
    check_readable,
    check_writable,
    compute_flags,
    flag_names,
)
from lance_spark_ops.table.format.manifest import (
    FOOTER_SIZE,
    Manifest,
    parse_manifest_file,
    serialize_manifest_file,
)
from lance_spark_ops.table.format.transaction import Transaction
from lance_spark_ops.table.paths import TRANSACTIONS_DIR, VERSIONS_DIR, scan_versions
from tests.table.datasets import SCENARIOS

ALL = [pytest.param(s, id=s) for s in SCENARIOS]


def _manifests(uri: str) -> list[tuple[str, bytes]]:
    store = ObjectStore(uri)
    _, versions = scan_versions(store.list(VERSIONS_DIR))
    rels = [f"{VERSIONS_DIR}/{n}" for _, n in sorted(versions.items())]
    return [(store.uri(rel), store.read(rel)) for rel in rels]


@pytest.mark.parametrize("scenario", ALL)
def test_pylance_manifests_roundtrip_exactly(pylance_dataset, scenario: str) -> None:
    uri = pylance_dataset(scenario, "2.2")
    store = ObjectStore(uri)
    for i, (path, data) in enumerate(_manifests(uri), start=1):
        mf = parse_manifest_file(data, path)
        m = mf.manifest
        assert m.version == i and m.writer_version is not None and m.writer_version.library == "lance"
        # pylance 14: field 23 holds the inline transaction offset, field 21 is not written
        assert m.transaction_offset is not None and m.transaction_section is None
        # the inline transaction is the _transactions/ file, byte for byte
        assert mf.transaction_bytes == store.read(f"{TRANSACTIONS_DIR}/{m.transaction_file}")
        txn = mf.transaction
        assert txn is not None and txn.file_name == m.transaction_file
        assert txn.to_bytes() == mf.transaction_bytes
        assert serialize_manifest_file(m, txn, mf.index_section) == data


def test_index_section(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "idx")
    ds = lance.write_dataset(pa.table({"a": pa.array(range(100), pa.int64())}), uri)
    ds.create_scalar_index("a", "BTREE")
    path, data = _manifests(uri)[-1]
    mf = parse_manifest_file(data, path)
    assert mf.manifest.index_section == 0 and mf.manifest.transaction_offset > 0
    section = mf.index_section
    assert section is not None and len(section.indices) == 1 and section.indices[0].name == "a_idx"
    assert isinstance(mf.transaction.operation, tx.CreateIndex)
    assert serialize_manifest_file(mf.manifest, mf.transaction, section) == data


def test_operations_read(pylance_dataset) -> None:
    import lance

    seen: dict[str, tx.Operation] = {}
    for scenario in SCENARIOS:
        uri = pylance_dataset(scenario, "2.1")
        for path, data in _manifests(uri):
            op = parse_manifest_file(data, path).transaction.operation
            seen.setdefault(type(op).__name__, op)
    expected = {"Overwrite", "Append", "Delete", "Update", "Rewrite", "Merge", "Project", "ReserveFragments"}
    assert expected <= set(seen)
    assert seen["Overwrite"].schema is not None and seen["Overwrite"].fragments
    assert seen["Delete"].predicate
    assert any(g.old_fragments and g.new_fragments for g in seen["Rewrite"].all_groups())
    del lance


def test_unknown_fields_survive() -> None:
    """Fields newer than our protos (pylance 14 writes some) are carried through unchanged."""
    from lance_spark_ops._pb import table_pb2, transaction_pb2
    from lance_spark_ops.table.format.fragment import DataFragment

    extra = b"\xa0\x06\x01"  # field 100, varint 1
    raw = table_pb2.DataFragment(id=4, physical_rows=9).SerializeToString() + extra
    assert DataFragment.from_pb(table_pb2.DataFragment.FromString(raw)).to_pb().SerializeToString() == raw
    op = transaction_pb2.Transaction.Merge(fragments=[table_pb2.DataFragment(id=1)])
    op_raw = op.SerializeToString() + b"\x20\x01"  # Merge field 4 = 1, as pylance 14 writes
    full = transaction_pb2.Transaction(read_version=1, uuid="x").SerializeToString()
    full += b"\xca\x06" + bytes([len(op_raw)]) + op_raw  # field 105 (merge), length-delimited
    assert Transaction.from_bytes(full).to_bytes() == full


def test_transaction_roundtrip_every_operation() -> None:
    from lance_spark_ops.file.schema import schema_from_arrow
    from lance_spark_ops.table.format.fragment import DataFile, DataFragment

    frag = DataFragment(3, [DataFile("x.lance", [0], [0], 2, 1, 100)], physical_rows=10)
    schema = schema_from_arrow(pa.schema([pa.field("a", pa.int64())]))
    ops = [tx.Append([frag]), tx.Delete([frag], [1, 2], "a > 1"), tx.Overwrite([frag], schema, {"k": "v"}),
           tx.Rewrite([tx.RewriteGroup([frag], [frag])]), tx.Merge([frag], schema), tx.Project(schema),
           tx.Restore(4), tx.ReserveFragments(5), tx.Update([1], [frag], [frag], [0], [], 1),
           tx.DataReplacement([tx.DataReplacementGroup(3, DataFile("y.lance", [1], [0]))])]
    for op in ops:
        t = Transaction(7, "u-u-i-d", op, transaction_properties={"p": "q"})
        again = Transaction.from_bytes(t.to_bytes())
        assert again == t, op
        assert again.file_name == "7-u-u-i-d.txn"


def test_corrupt_manifest_bytes(pylance_dataset) -> None:
    _, data = _manifests(pylance_dataset("basic", "2.2"))[-1]
    pos = struct.unpack_from("<q", data, len(data) - FOOTER_SIZE)[0]
    cases = {
        "magic": data[:-4] + b"XXXX",
        "at least": data[-10:],
        "outside": data[:-FOOTER_SIZE] + struct.pack("<qHH4s", len(data) + 5, 0, 2, b"LANC"),
        "records": data[:pos] + struct.pack("<I", 5) + data[pos + 4:],
        "does not parse": (data[:pos + 4] + b"\xff" * (len(data) - pos - 4 - FOOTER_SIZE)
                           + data[-FOOTER_SIZE:]),
    }
    for what, bad in cases.items():
        with pytest.raises(CorruptFileError, match=what) as e:
            parse_manifest_file(bad, "the/path")
        assert e.value.path == "the/path"
    # a transaction offset pointing past the manifest start
    m = parse_manifest_file(data).manifest
    body = m.to_pb()
    body.transaction_offset = pos + 1
    raw = body.SerializeToString()
    bad = data[:pos] + struct.pack("<I", len(raw)) + raw + struct.pack("<qHH4s", pos, 0, 2, b"LANC")
    with pytest.raises(CorruptFileError, match="inline transaction"):
        parse_manifest_file(bad, "p")


def test_manifest_defaults_and_helpers(pylance_dataset) -> None:
    path, data = _manifests(pylance_dataset("stable_row_ids", "2.2"))[-1]
    m = parse_manifest_file(data, path).manifest
    assert isinstance(m, Manifest) and m.uses_stable_row_ids
    assert m.max_field_id() == 2 and m.fragment(m.fragments[0].id) is m.fragments[0]
    assert m.timestamp.year >= 2024 and m.data_storage_version == "2.2"


def test_feature_flags() -> None:
    check_readable(FLAG_DELETION_FILES | FLAG_STABLE_ROW_IDS | 4 | 8 | 16 | 32)
    check_writable(63)
    with pytest.raises(UnsupportedError, match="reader feature flags 0x41"):
        check_readable(64 | 1, "ds")
    with pytest.raises(UnsupportedError, match="writer"):
        check_writable(1 << 40)
    assert flag_names(3 | 128) == ["deletion_files", "stable_row_ids", "bit7"]
    assert compute_flags(has_deletion_files=True, stable_row_ids=True) == (3, 3)
    flags = compute_flags(has_deletion_files=False, stable_row_ids=False, has_config=True)
    assert flags == (0, FLAG_TABLE_CONFIG)
