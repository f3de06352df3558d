"""Each failure gives its typed error naming the path: missing dataset or version, corrupt
manifest, mixed naming, a data or deletion file that is gone, a manifest path that escapes
the dataset root, unknown feature flags, row counts that do not add up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lance_spark_ops import CorruptFileError, Dataset, NotFoundError, UnsupportedError
from lance_spark_ops.table.format.manifest import parse_manifest_file, serialize_manifest_file
from lance_spark_ops.table.paths import ManifestNamingScheme


def _latest_manifest(uri: str) -> str:
    d = os.path.join(uri, "_versions")
    return os.path.join(d, sorted(n for n in os.listdir(d) if n.endswith(".manifest"))[0])


def _edit_manifest(uri: str, edit) -> None:
    """Apply ``edit(manifest)`` to the latest manifest and write it back in place."""
    path = _latest_manifest(uri)
    with open(path, "rb") as f:
        mf = parse_manifest_file(f.read(), path)
    edit(mf.manifest)
    with open(path, "wb") as f:
        f.write(serialize_manifest_file(mf.manifest, mf.transaction_bytes, mf.index_section))


def test_missing_dataset(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no Lance dataset") as e:
        Dataset.open(str(tmp_path / "nope"))
    assert "nope" in e.value.path
    (tmp_path / "empty" / "_versions").mkdir(parents=True)
    with pytest.raises(NotFoundError):
        Dataset.open(str(tmp_path / "empty"))


def test_missing_version(pylance_dataset) -> None:
    uri = pylance_dataset("basic", "2.2")
    with pytest.raises(NotFoundError, match="version 9 does not exist"):
        Dataset.open(uri, version=9)
    assert Dataset.open(uri, version=1).count_rows() == 2500


@pytest.mark.parametrize("damage", ["truncate", "magic", "garbage"])
def test_corrupt_manifest(dataset_copy, damage: str) -> None:
    uri = dataset_copy("basic")
    path = _latest_manifest(uri)
    data = open(path, "rb").read()
    bad = {"truncate": data[: len(data) // 2], "magic": data[:-4] + b"NOPE",
           "garbage": b"\x00" * 10 + data[10:-20] + b"\xff" * 4 + data[-16:]}[damage]
    open(path, "wb").write(bad)
    with pytest.raises(CorruptFileError) as e:
        Dataset.open(uri)
    assert e.value.path.endswith(os.path.basename(path))


def test_manifest_named_for_another_version(dataset_copy) -> None:
    uri = dataset_copy("basic")
    d = os.path.join(uri, "_versions")
    os.rename(_latest_manifest(uri), os.path.join(d, ManifestNamingScheme.V2.manifest_name(5)))
    with pytest.raises(CorruptFileError, match="holds version 2"):
        Dataset.open(uri)


def test_mixed_naming(dataset_copy) -> None:
    uri = dataset_copy("basic")
    d = os.path.join(uri, "_versions")
    os.link(_latest_manifest(uri), os.path.join(d, "2.manifest"))
    with pytest.raises(CorruptFileError, match="mixes manifest naming schemes"):
        Dataset.open(uri)


def test_missing_data_file(dataset_copy) -> None:
    uri = dataset_copy("basic")
    ds = Dataset.open(uri)
    gone = ds.fragments[1].files[0].path
    os.remove(os.path.join(uri, "data", gone))
    ds.to_table(fragment_ids=[0])  # other fragments still read
    with pytest.raises(NotFoundError, match="data file of fragment 1 is missing") as e:
        ds.to_table()
    assert e.value.path.endswith(gone)


def test_missing_deletion_file(dataset_copy) -> None:
    uri = dataset_copy("deletions")
    ds = Dataset.open(uri)
    for name in os.listdir(os.path.join(uri, "_deletions")):
        os.remove(os.path.join(uri, "_deletions", name))
    with pytest.raises(NotFoundError, match="deletion file"):
        ds.to_table()


@pytest.mark.parametrize("bad_path", ["../outside.lance", "/etc/hostname", "sub/../../outside.lance"])
def test_data_path_escaping_root(dataset_copy, bad_path: str) -> None:
    uri = dataset_copy("basic")
    good = Dataset.open(uri).fragments[0].files[0].path
    if bad_path.endswith("outside.lance"):  # a real file there must not be read
        os.link(os.path.join(uri, "data", good), os.path.join(uri, "outside.lance"))

    def edit(m):
        m.fragments[0].files[0].path = bad_path

    _edit_manifest(uri, edit)
    with pytest.raises(CorruptFileError, match="inside the dataset root"):
        Dataset.open(uri).to_table()


def test_row_id_file_escaping_root(dataset_copy) -> None:
    from lance_spark_ops.table.format.fragment import ExternalFile

    uri = dataset_copy("stable_row_ids")

    def edit(m):
        m.fragments[0].row_id_meta = ExternalFile("../ids.bin", 0, 8)

    _edit_manifest(uri, edit)
    with pytest.raises(CorruptFileError, match="inside the dataset root"):
        Dataset.open(uri).to_table(with_row_id=True)


def test_unknown_reader_flag(dataset_copy) -> None:
    import lance

    uri = dataset_copy("basic")
    _edit_manifest(uri, lambda m: setattr(m, "reader_feature_flags", m.reader_feature_flags | 64))
    with pytest.raises(UnsupportedError, match="reader feature flags"):
        Dataset.open(uri)
    with pytest.raises(Exception, match="(?i)feature|flag|unsupported"):  # pylance refuses it too
        lance.dataset(uri).to_table()


def test_unknown_writer_flag(dataset_copy) -> None:
    uri = dataset_copy("basic")
    _edit_manifest(uri, lambda m: setattr(m, "writer_feature_flags", 1 << 20))
    ds = Dataset.open(uri)
    assert ds.to_table().num_rows == 2800  # reading is fine
    with pytest.raises(UnsupportedError, match="writer feature flags"):
        ds.check_writable()


def test_row_counts_that_do_not_add_up(dataset_copy) -> None:
    uri = dataset_copy("basic")

    def edit(m):
        m.fragments[0].physical_rows += 1

    _edit_manifest(uri, edit)
    with pytest.raises(CorruptFileError, match="rows"):
        Dataset.open(uri).to_table()


def test_bad_arguments(pylance_dataset) -> None:
    ds = Dataset.open(pylance_dataset("basic", "2.2"))
    with pytest.raises(NotFoundError, match="no column"):
        ds.to_table(columns=["a", "zz"])
    with pytest.raises(NotFoundError, match="no fragment"):
        ds.to_table(fragment_ids=[42])


def test_unregistered_base_path_refused(dataset_copy) -> None:
    uri = dataset_copy("basic")

    def edit(m):
        m.fragments[0].files[0].base_id = 1

    _edit_manifest(uri, edit)
    with pytest.raises(CorruptFileError, match="base path id 1"):
        Dataset.open(uri).to_table()
