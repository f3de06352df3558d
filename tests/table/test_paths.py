"""Manifest naming (V1 / V2) both ways, scheme detection from a listing, the version hint,
and the guard that keeps manifest paths inside the dataset root."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_spark_ops import CorruptFileError
from lance_spark_ops.table.format.fragment import DataFile, DeletionFile, DeletionFileType
from lance_spark_ops.table.paths import (
    ManifestNamingScheme,
    data_file_path,
    deletion_file_path,
    detect_scheme,
    parse_version_hint,
    safe_relative,
    scan_versions,
    transaction_file_name,
    version_hint_bytes,
)

V1, V2 = ManifestNamingScheme.V1, ManifestNamingScheme.V2


def test_names() -> None:
    assert V1.manifest_name(1) == "1.manifest"
    assert V2.manifest_name(1) == "18446744073709551614.manifest"
    assert V2.manifest_path(0) == "_versions/18446744073709551615.manifest"
    assert detect_scheme("18446744073709551614.manifest") is V2
    assert detect_scheme("12.manifest") is V1
    junk_names = ("latest_version_hint.json", ".tmp_7.manifest_9c10", "7.manifest-1b2c", "d9.manifest",
                  "x.manifest")
    for junk in junk_names:
        assert detect_scheme(junk) is None


@settings(deadline=None)
@given(st.integers(0, 2**64 - 1), st.sampled_from([V1, V2]))
def test_names_roundtrip(version: int, scheme: ManifestNamingScheme) -> None:
    name = scheme.manifest_name(version)
    assert detect_scheme(name) is (V2 if scheme is V2 or len(name) == 29 else V1)
    assert scheme.parse_version(name) == version


def test_v2_names_sort_newest_first() -> None:
    names = sorted(V2.manifest_name(v) for v in (1, 2, 10, 100))
    assert [V2.parse_version(n) for n in names] == [100, 10, 2, 1]


def test_scan_versions() -> None:
    names = ["latest_version_hint.json", *(V2.manifest_name(v) for v in (1, 2, 3)), ".tmp_x"]
    assert scan_versions(names) == (V2, {v: V2.manifest_name(v) for v in (1, 2, 3)})
    assert scan_versions(["1.manifest", "2.manifest"]) == (V1, {1: "1.manifest", 2: "2.manifest"})
    assert scan_versions([]) == (None, {})
    with pytest.raises(CorruptFileError, match="mixes manifest naming schemes"):
        scan_versions(["1.manifest", V2.manifest_name(2)], "ds/_versions")


def test_hint(pylance_dataset) -> None:
    uri = pylance_dataset("basic", "2.2")
    data = open(os.path.join(uri, "_versions", "latest_version_hint.json"), "rb").read()
    assert parse_version_hint(data) == 2 and version_hint_bytes(2) == data
    for bad in (b"", b"{", b'{"version": "2"}', b"[]", b'{"version": -1}', b"\xff", b'{"version": true}'):
        assert parse_version_hint(bad) is None


def test_file_paths() -> None:
    assert data_file_path(DataFile("abc.lance", [0], [0])) == "data/abc.lance"
    d = DeletionFile(DeletionFileType.BITMAP, 3, 99, 5000)
    assert deletion_file_path(7, d) == "_deletions/7-3-99.bin"
    assert transaction_file_name(4, "u") == "4-u.txn"


@pytest.mark.parametrize("path", ["../x.lance", "a/../../x", "/etc/passwd", "\\\\host\\x", "C:\\x", "s3://b/k",
                                  "", "a//b", "./x"])
def test_escaping_paths_rejected(path: str) -> None:
    with pytest.raises(CorruptFileError, match="inside the dataset root"):
        safe_relative(path, "data file", "manifest")
    with pytest.raises(CorruptFileError):
        data_file_path(DataFile(path, [0], [0]))


def test_nested_relative_paths_allowed() -> None:
    assert safe_relative("stem/00001.blob", "blob") == "stem/00001.blob"


@pytest.mark.parametrize("hint", [b'{"version": 1}', b'{"version": 99}', b"garbage"])
def test_stale_or_bad_hint_is_ignored(dataset_copy, hint: bytes) -> None:
    """The latest version comes from the listing; a stale, future or broken hint changes nothing."""
    import lance

    from lance_spark_ops.table.dataset import Dataset

    uri = dataset_copy("basic", "2.2")
    with open(os.path.join(uri, "_versions", "latest_version_hint.json"), "wb") as f:
        f.write(hint)
    assert Dataset.open(uri).version == lance.dataset(uri).version == 2
