"""Opening a manifest checks its fragments with the protobuf library a run at a time
(``manifest._check_fragments``): no parse ever holds all fragments (the whole-message parse of
a million fragments took ~350 MB at once on every executor), the fragments read are those of a
whole parse, and a bad fragment in any run is still refused at open."""

from __future__ import annotations

import struct

import pytest

import lance_spark_ops.table.format.manifest as manifest_module
from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.manifest import FOOTER, parse_manifest_file

FRAGMENTS = 3000


def _many(pylance_dataset) -> tuple[table_pb2.Manifest, bytes]:
    """A pylance manifest (its fragments repeated under new ids, ``FRAGMENTS`` of them) and
    its bytes."""
    ds = Dataset.open(pylance_dataset("deletions", "2.2"))
    data = ds.store.read(ds.manifest_path)
    pos = struct.unpack_from("<q", data, len(data) - 16)[0]
    pb = table_pb2.Manifest.FromString(data[pos + 4 : len(data) - 16])
    for name in ("transaction_offset", "transaction_section", "index_section"):
        pb.ClearField(name)
    frags = list(pb.fragments)
    del pb.fragments[:]
    for i in range(FRAGMENTS):
        f = pb.fragments.add()
        f.CopyFrom(frags[i % len(frags)])
        f.id = i
    pb.max_fragment_id = FRAGMENTS - 1
    return pb, pb.SerializeToString()


def _file(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body + FOOTER.pack(0, 0, 2, b"LANC")


class _Spy:
    """``table_pb2`` as the manifest module sees it, noting the size of every Manifest parsed."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        spy = self

        class Manifest:
            @staticmethod
            def FromString(raw: bytes) -> table_pb2.Manifest:  # noqa: N802 - protobuf's name
                spy.sizes.append(len(raw))
                return table_pb2.Manifest.FromString(raw)

        self.Manifest = Manifest

    def __getattr__(self, name: str) -> object:
        return getattr(table_pb2, name)


def test_fragments_are_checked_a_run_at_a_time(pylance_dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    pb, body = _many(pylance_dataset)
    spy = _Spy()
    monkeypatch.setattr(manifest_module, "table_pb2", spy)
    manifest = parse_manifest_file(_file(body), check_bytes=16 * 1024).manifest
    assert "_fragment_source" in manifest.__dict__  # the bulk path was taken
    largest_fragment = max(f.ByteSize() for f in pb.fragments) + 3
    runs = [n for n in spy.sizes if n > 1024]  # (the manifest without its fragments is smaller)
    assert len(body) > 10 * 16 * 1024 and len(runs) >= 10
    assert max(spy.sizes) <= 16 * 1024 + largest_fragment  # never the whole manifest
    assert sum(runs) >= len(body) - 1024  # every fragment was checked
    assert manifest.fragments == [DataFragment.from_pb(f) for f in pb.fragments]


@pytest.mark.parametrize("where", [0, FRAGMENTS // 2, FRAGMENTS - 1])
def test_a_bad_fragment_in_any_run_is_refused_at_open(pylance_dataset, where: int) -> None:
    pb, _ = _many(pylance_dataset)
    path = pb.fragments[where].files[0].path
    pb.fragments[where].files[0].path = "\u00e9" * (len(path.encode()) // 2)  # same byte length
    body = pb.SerializeToString().replace("\u00e9".encode() * (len(path.encode()) // 2),
                                          b"\xff\xfe" * (len(path.encode()) // 2))  # not UTF-8
    with pytest.raises(Exception):  # noqa: B017, PT011 - the protobuf library refuses it as well
        table_pb2.Manifest.FromString(body)
    with pytest.raises(CorruptFileError, match="does not parse") as e:
        parse_manifest_file(_file(body), "the/manifest", check_bytes=16 * 1024)
    assert e.value.path == "the/manifest"
