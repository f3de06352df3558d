"""Scan one fragment: stitch its data files by field id, drop deleted rows, add row ids.

Which column of which data file holds a dataset field comes from the manifest only:
``DataFile.fields[i]`` is stored in column ``DataFile.column_indices[i]`` of that file (``-1``:
no column of its own; field id ``-2``: tombstone, skipped). File columns are numbered as
Lance's ``ReaderProjection::from_whole_schema`` numbers them over the *file's* schema: pre-order,
every field in 2.0, only leaves in 2.1+, a packed struct is one column (children skipped).

To find the file field that corresponds to a dataset field we take any field of its subtree
that has a column, find the file field owning that column, and climb as many levels as the
dataset field sits above it (example, 2.1: dataset ``l: list<item>`` has no column, ``item``
(id 5) is column 3; the owner of column 3 is the file's ``item``, one level up is its list).
That file field's top-level ancestor is read through ``LanceFileReader`` and the nested value is
taken out and conformed to the dataset type: renamed, struct children matched the same way
(children in no file read as nulls), other differences cast. A struct whose children are
spread over several files is assembled child by child. Fields in no data file are all-null.

Deleted rows are removed per batch. ``_rowid`` is the fragment's row-id sequence at the row's
offset under stable row ids, else the row address ``(fragment_id << 32) | offset``;
``_rowaddr`` is always the address. Both are ``uint64`` and come after the data columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.encoding.carried_dictionary import mark_field, plain_type, twin_bitmap
from lance_spark_ops.errors import (
    CorruptFileError,
    InconsistentDatasetError,
    InvalidInputError,
    NotFoundError,
    UnsupportedError,
)
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.file.schema import LanceField, LanceSchema
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.blob import V2_DESCRIPTION, blob_version, description_field, v1_descriptions
from lance_spark_ops.table.format.fragment import DataFile, DataFragment
from lance_spark_ops.table.format.support import check_data_file
from lance_spark_ops.table.paths import BaseResolver
from lance_spark_ops.table.validate import file_findings, raise_if_refused

ROW_ID = "_rowid"
ROW_ADDR = "_rowaddr"
BLOB_MODES = ("descriptions", "bytes")
_PACKED_KEYS = (b"packed", b"lance-encoding:packed")


def output_schema(fields: list[LanceField], with_row_id: bool, with_row_address: bool,
                  metadata: dict[bytes, bytes] | None = None, blobs: str = "descriptions") -> pa.Schema:
    """Dataset fields, then ``_rowid`` and ``_rowaddr`` (``uint64``) when asked for.

    Blob columns (``table.blob``) are their descriptions, as pylance's ``to_table`` returns
    them, unless ``blobs="bytes"`` (blob v1 only: the payloads, as the dataset type).
    """
    if blobs not in BLOB_MODES:
        raise InvalidInputError(f"blobs must be one of {BLOB_MODES}, got {blobs!r}")
    out = [description_field(f) if blobs == "descriptions" and blob_version(f) else f.to_arrow()
           for f in fields]
    if with_row_id:
        out.append(pa.field(ROW_ID, pa.uint64()))
    if with_row_address:
        out.append(pa.field(ROW_ADDR, pa.uint64()))
    return pa.schema(out, metadata=metadata or None)


def _open_reader(store: ObjectStore, rel: str, legacy: bool = False) -> LanceFileReader:
    return LanceFileReader(rel, store=store, legacy=legacy)


def file_field_ids(data_file: DataFile) -> set[int]:
    """Dataset field ids stored in ``data_file`` (``DataFile.stored_field_ids``)."""
    return data_file.stored_field_ids()


def is_packed(node: LanceField) -> bool:
    return any(node.metadata.get(k, b"").lower() == b"true" for k in _PACKED_KEYS)


def column_owners(fields: list[LanceField], version: str) -> list[LanceField]:
    """File field owning each column, in column order (``from_whole_schema``)."""
    owners: list[LanceField] = []
    structural = version != "2.0"

    def visit(node: LanceField) -> None:
        if is_packed(node):
            owners.append(node)
            return
        if not node.children or not structural:
            owners.append(node)
        for c in node.children:
            visit(c)

    for f in fields:
        visit(f)
    return owners


def _walk_depth(node: LanceField, depth: int = 0) -> Iterator[tuple[int, LanceField]]:
    yield depth, node
    for c in node.children:
        yield from _walk_depth(c, depth + 1)


_MAPS: dict[tuple[int, str], tuple[LanceSchema, list[LanceField], dict[int, LanceField | None]]] = {}


def _schema_maps(schema: LanceSchema, version: str) -> tuple[list[LanceField], dict[int, LanceField | None]]:
    """Column owners and each node's parent (by ``id``) of a file schema. Remembered per schema
    object: ``file.metadata`` shares one object among the files of one schema, so a task over
    many small files builds these once. Read-only for callers."""
    key = (id(schema), version)
    hit = _MAPS.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1], hit[2]
    owners = column_owners(schema.fields, version)
    parent: dict[int, LanceField | None] = {}
    for top in schema.fields:
        parent[id(top)] = None
        for node in top.walk():
            for c in node.children:
                parent[id(c)] = node
    if len(_MAPS) > 256:
        _MAPS.clear()
    _MAPS[key] = (schema, owners, parent)  # the entry holds the schema: its id stays unique
    return owners, parent



def batch_bounds(first: int, last: int, batch_rows: int) -> list[tuple[int, int]]:
    """Rows ``first..last`` cut every ``batch_rows``, a tail shorter than half a batch joined
    to the batch before it: a fragment a little longer than a batch is one batch, so its
    pages are decoded whole rather than twice, in parts."""
    cuts = [*range(first, last, batch_rows), last]
    if len(cuts) > 2 and cuts[-1] - cuts[-2] < batch_rows // 2:
        del cuts[-2]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def _file_batches(reader: LanceFileReader, columns: list[str], bounds: list[tuple[int, int]],
                  keep_dictionaries: bool = False) -> Iterator[pa.RecordBatch]:
    """One record batch of ``columns`` per bound, read lazily (``keep_dictionaries``: 2.1+
    files only; legacy and 2.0 files decode everything)."""
    keep = {"keep_dictionaries": True} if keep_dictionaries and isinstance(reader, LanceFileReader) else {}
    for a, b in bounds:
        yield from reader.iter_batches(columns, b - a, a, b, **keep)


def _fields_like(fields: list[pa.Field], arrays: list[pa.Array]) -> list[pa.Field]:
    """``fields`` with the types of ``arrays`` (carried dictionaries, see ``FragmentScan``)."""
    return [f if f.type == a.type else f.with_type(a.type) for f, a in zip(fields, arrays, strict=True)]

class FileView:
    """One opened data file with the dataset-field -> file-field mapping."""

    def __init__(self, data_file: DataFile, reader: LanceFileReader, where: str) -> None:
        self.reader = reader
        self.where = where
        schema = reader.metadata.schema
        if data_file.is_legacy:  # one "column" per field, pre-order, as in 2.0
            self.owners, self.parent = _schema_maps(schema, "2.0")
            listed = file_field_ids(data_file)
            own = {o.id: i for i, o in enumerate(self.owners)}
            # Lance finds a v1 file's pages by the dataset id's distance from the DataFile's
            # first field id, not by the ids of the file's own schema: the same ids unless a
            # commit renumbered them (duplicate field ids repaired, table.commit.migrate)
            first = data_file.fields[0] if data_file.fields else -1
            shift = min(own) - first if own and first >= 0 else 0
            self.colmap = {f: own[f + shift] for f in listed if f + shift in own}
        else:
            self.colmap = data_file.field_columns()
            self.owners, self.parent = _schema_maps(schema, reader.version)

    def covers(self, dnode: LanceField) -> bool:
        return any(n.id in self.colmap for n in dnode.walk())

    def counterpart(self, dnode: LanceField) -> LanceField | None:
        """The file field holding ``dnode`` (None if no field of its subtree is in this file)."""
        for depth, n in _walk_depth(dnode):
            col = self.colmap.get(n.id)
            if col is None:
                continue
            if col >= len(self.owners):
                raise CorruptFileError(f"manifest maps field {n.id} to column {col} but the file has "
                                       f"{len(self.owners)} columns", path=self.where)
            node: LanceField | None = self.owners[col]
            for _ in range(depth):
                node = self.parent.get(id(node)) if node is not None else None
            if node is None:
                raise CorruptFileError(f"field {dnode.name!r} (id {dnode.id}) does not fit the file schema "
                                       f"at column {col}", path=self.where)
            return node
        return None

    def path_of(self, fnode: LanceField) -> tuple[str, list[int]]:
        """Top-level column name and struct child indices leading to ``fnode``."""
        path: list[int] = []
        node = fnode
        while (up := self.parent.get(id(node))) is not None:
            if up.logical_type != "struct":
                raise UnsupportedError(f"field {fnode.name!r} sits inside a {up.logical_type!r} of the "
                                       "file and cannot be read on its own", path=self.where)
            path.append(next(i for i, c in enumerate(up.children) if c is node))
            node = up
        return node.name, path[::-1]

    def conform(self, arr: pa.Array, fnode: LanceField, dnode: LanceField, carried: bool = False) -> pa.Array:
        """``arr`` (file field ``fnode``) as the dataset type of ``dnode``; ``carried``: a
        kept dictionary (``FragmentScan`` ``keep_dictionaries``) may stand for its plain type."""
        target = dnode.arrow_type()
        if arr.type == target or (carried and plain_type(arr.type) == target):
            return arr
        if dnode.logical_type == "struct" and pa.types.is_struct(arr.type) and not is_packed(dnode):
            children = []
            for dc in dnode.children:
                fc = self.counterpart(dc)
                if fc is None or self.parent.get(id(fc)) is not fnode:
                    children.append(pa.nulls(len(arr), dc.arrow_type()))
                else:
                    idx = next(i for i, c in enumerate(fnode.children) if c is fc)
                    children.append(self.conform(arr.field(idx), fc, dc, carried))
            mask = pc.invert(arr.is_valid()) if arr.null_count else None
            fields = _fields_like(list(target), children)
            return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
        try:
            return arr.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise CorruptFileError(f"field {dnode.name!r} is {arr.type} in the file, the dataset says "
                                   f"{target}", path=self.where) from e


@dataclass
class _Nulls:
    type: pa.DataType


@dataclass
class _FromFile:
    file: int
    top: str
    path: list[int]
    fnode: LanceField
    dnode: LanceField
    raw: bool = False  # blob v2 descriptions: the file's type, not the dataset's


@dataclass
class _BlobDescriptions:
    """A blob v1 column read as (position, size) descriptions, payloads left alone."""

    file: int
    top: str


@dataclass
class _StructOf:
    dnode: LanceField
    children: list[_Plan]
    validity: _FromFile


_Plan = _Nulls | _FromFile | _StructOf | _BlobDescriptions


class FragmentScan:
    """Batches of one fragment with the given dataset fields (+ row id / address columns)."""

    def __init__(self, store: ObjectStore, fragment: DataFragment, fields: list[LanceField], *,
                 row_ids: np.ndarray | None, keep: np.ndarray | None,
                 with_row_id: bool, with_row_address: bool, blobs: str = "descriptions",
                 resolver: BaseResolver | None = None, schema: pa.Schema | None = None,
                 keep_dictionaries: bool = False, storage_version: str | None = None,
                 trust_counts: bool = True) -> None:
        """``row_ids``: the decoded sequence under stable row ids (else None: ids = addresses);
        ``keep``: live-row mask over the physical rows (None: nothing deleted); ``blobs``: see
        ``output_schema``; ``schema``: that ``output_schema`` when the caller has it;
        ``keep_dictionaries``: dictionary-encoded string leaves stay dictionary arrays (for a
        re-encode: ``encoding.carried_dictionary``); batches then carry those types.
        ``storage_version``: the manifest's data storage version (2.x files of another version
        are refused, as pylance refuses them); ``trust_counts``: False when the manifest names
        no writer (its ``physical_rows`` may be wrong, lance#1531: the files' count is used, as
        pylance does). Every file opened is checked against its entry (``table.validate``)."""
        self.storage_version = storage_version
        self.trust_counts = trust_counts
        self.keep_dictionaries = keep_dictionaries
        self.store = store
        self.fragment = fragment
        self.fields = fields
        self.row_ids = row_ids
        self.keep = keep
        self.with_row_id = with_row_id
        self.with_row_address = with_row_address
        self.blobs = blobs
        self.resolver = resolver if resolver is not None else BaseResolver(store, [])
        self.schema = schema if schema is not None else output_schema(fields, with_row_id, with_row_address,
                                                                      blobs=blobs)
        self.views: dict[int, FileView] = {}
        self._check_files()
        self.plans = [self._plan(f) for f in fields]
        self.num_rows = self._physical_rows()

    # -- planning --------------------------------------------------------
    def _check_files(self) -> None:
        """Refuse any data file we cannot read before planning: a file left out of the plan
        would read as nulls. A fragment without data files, or with a 2.x file of another
        version than the dataset's, is refused (pylance refuses both)."""
        if not self.fragment.files:
            raise InconsistentDatasetError(f"fragment {self.fragment.id} has no data files (pylance: "
                                           "does not contain any data)")
        for df in self.fragment.files:
            store, rel = self.resolver.data_file(df, f"fragment {self.fragment.id}")
            where = store.uri(rel)
            check_data_file(df, where, legacy_ok=True)
            df.validate(where)
            version = self.storage_version
            if version not in (None, "0.1") and (df.is_legacy or df.file_version != version):
                raise InconsistentDatasetError(f"data file of fragment {self.fragment.id} has version "
                                               f"{df.file_version}, the manifest's data storage version is "
                                               f"{version}", path=where)

    def _view(self, k: int) -> FileView:
        if k not in self.views:
            df = self.fragment.files[k]
            store, rel = self.resolver.data_file(df, f"fragment {self.fragment.id}")
            where = store.uri(rel)
            try:
                reader = _open_reader(store, rel, df.is_legacy)
            except NotFoundError as e:
                raise NotFoundError(f"data file of fragment {self.fragment.id} is missing", path=where) from e
            meta = getattr(reader, "metadata", None)
            raise_if_refused(file_findings(self.fragment, df, footer_rows=reader.num_rows,
                                           footer_version=None if df.is_legacy else reader.version,
                                           object_size=getattr(meta, "size", None),
                                           trust_counts=False), where)
            self.views[k] = FileView(df, reader, where)
        return self.views[k]

    def _covering(self, dnode: LanceField) -> list[int]:
        ids = {n.id for n in dnode.walk()}
        return [k for k, df in enumerate(self.fragment.files) if ids & file_field_ids(df)]

    def _plan(self, dnode: LanceField) -> _Plan:
        files = self._covering(dnode)
        blob = blob_version(dnode)
        if blob and self.blobs == "descriptions":
            if not files:
                return _Nulls(description_field(dnode).type)
            return self._blob_plan(files, dnode, blob)
        if blob == 2:
            raise UnsupportedError(f"blob v2 column {dnode.name!r}: reading or rewriting its payloads "
                                   "through a scan is not supported (use Dataset.take_blobs)")
        if not files:
            return _Nulls(dnode.arrow_type())
        if len(files) == 1 or dnode.logical_type != "struct" or is_packed(dnode):
            if len(files) > 1 and not dnode.children and all(self.fragment.files[k].is_legacy for k in files):
                # pylance 0.10.5's add / drop columns left one field id in several v1 files;
                # pylance 14 reads the first file holding it (a commit repairs the ids:
                # table.commit.migrate)
                files = files[:1]
            if len(files) > 1:
                raise UnsupportedError(f"field {dnode.name!r} (id {dnode.id}) is split over "
                                       f"{len(files)} data files of fragment {self.fragment.id}")
            return self._from_file(files[0], dnode)
        children = [self._plan(c) for c in dnode.children]
        return _StructOf(dnode, children, self._from_file(files[0], dnode))

    def _blob_plan(self, files: list[int], dnode: LanceField, blob: int) -> _Plan:
        if len(files) > 1:
            raise UnsupportedError(f"blob column {dnode.name!r} is split over {len(files)} data files")
        plan = self._from_file(files[0], dnode)
        if plan.path:
            raise UnsupportedError(f"blob column {dnode.name!r} inside a struct is not supported",
                                   path=self.views[plan.file].where)
        if blob == 1:
            return _BlobDescriptions(plan.file, plan.top)
        plan.raw = True
        return plan

    def _from_file(self, k: int, dnode: LanceField) -> _FromFile:
        view = self._view(k)
        fnode = view.counterpart(dnode)
        if fnode is None:  # _covering found a column of this subtree in file k
            raise CorruptFileError(f"field {dnode.name!r} not found in the data file", path=view.where)
        top, path = view.path_of(fnode)
        return _FromFile(k, top, path, fnode, dnode)

    def _physical_rows(self) -> int:
        declared = self.fragment.physical_rows if self.trust_counts else None
        counts = {k: v.reader.num_rows for k, v in self.views.items()}
        if declared is None:
            if not counts and self.fragment.files:
                counts[0] = self._view(0).reader.num_rows
            declared = next(iter(counts.values()), 0)
        for k, n in counts.items():
            if n != declared:
                raise InconsistentDatasetError(f"data file has {n} rows, fragment {self.fragment.id} has "
                                               f"{declared}", path=self.views[k].where)
        return declared

    # -- execution -------------------------------------------------------
    def _eval(self, plan: _Plan, batches: dict[int, pa.RecordBatch], start: int, n: int) -> pa.Array:
        if isinstance(plan, _Nulls):
            return pa.nulls(n, plan.type)
        if isinstance(plan, _BlobDescriptions):
            reader = self.views[plan.file].reader
            return v1_descriptions(*reader.blob_descriptions(plan.top, start, start + n))
        if isinstance(plan, _FromFile):
            arr = batches[plan.file].column(plan.top)
            for i in plan.path:
                arr = arr.field(i)
            if plan.raw:
                if arr.type != V2_DESCRIPTION:
                    raise CorruptFileError(f"blob column {plan.dnode.name!r} is {arr.type} in the file, "
                                           f"expected the descriptions {V2_DESCRIPTION}",
                                           path=self.views[plan.file].where)
                return arr
            return self.views[plan.file].conform(arr, plan.fnode, plan.dnode, self.keep_dictionaries)
        children = [self._eval(c, batches, start, n) for c in plan.children]
        holder = self._eval(plan.validity, batches, start, n)
        mask = pc.invert(holder.is_valid()) if holder.null_count else None
        fields = _fields_like(list(plan.dnode.arrow_type()), children)
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)

    def _file_columns(self) -> dict[int, list[str]]:
        need: dict[int, list[str]] = {}

        def collect(plan: _Plan) -> None:
            if isinstance(plan, _FromFile):
                names = need.setdefault(plan.file, [])
                if plan.top not in names:
                    names.append(plan.top)
            elif isinstance(plan, _StructOf):
                collect(plan.validity)
                for c in plan.children:
                    collect(c)

        for p in self.plans:
            collect(p)
        return need

    def batches(self, batch_rows: int, first: int = 0, last: int | None = None) -> Iterator[pa.RecordBatch]:
        """Live rows among physical rows ``first..last`` (default all) in physical order, in
        batches of ``batch_bounds``: at most 1.5 x ``batch_rows`` physical rows."""
        n_total = self.num_rows if last is None else last
        if not 0 <= first <= n_total <= self.num_rows:
            raise InvalidInputError(f"row range {first}..{n_total} is outside fragment {self.fragment.id} "
                                    f"of {self.num_rows} rows")
        need = self._file_columns()
        bounds = batch_bounds(first, n_total, batch_rows)
        iters = {k: _file_batches(self.views[k].reader, cols, bounds, self.keep_dictionaries)
                 for k, cols in need.items()}
        frag_base = np.uint64(self.fragment.id) << np.uint64(32)
        for start, stop in bounds:
            n = stop - start
            batches = {}
            for k, it in iters.items():
                b = next(it, None)
                if b is None or b.num_rows != n:
                    raise CorruptFileError(f"data file yielded {0 if b is None else b.num_rows} rows for "
                                           f"rows {start}..{stop}", path=self.views[k].where)
                batches[k] = b
            keep = None if self.keep is None else self.keep[start:stop]
            if keep is not None and not keep.any():
                continue
            arrays = [self._eval(p, batches, start, n) for p in self.plans]
            if self.with_row_id or self.with_row_address:
                addr = np.arange(start, stop, dtype=np.uint64) | frag_base
                if self.with_row_id:
                    ids = addr if self.row_ids is None else self.row_ids[start:stop]
                    arrays.append(pa.array(ids, pa.uint64()))
                if self.with_row_address:
                    arrays.append(pa.array(addr, pa.uint64()))
            filtered = keep is not None and not keep.all()
            if arrays:
                schema = self.schema
                if self.keep_dictionaries:
                    schema = self._carried_schema(arrays, batches, filtered)
                batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            else:  # no columns at all: keep the row count
                batch = pa.record_batch([pa.nulls(n)], names=["_"]).drop_columns(["_"])
            if filtered:
                batch = batch.filter(pa.array(keep))
            yield batch

    def _carried_schema(self, arrays: list[pa.Array], batches: dict[int, pa.RecordBatch],
                        filtered: bool) -> pa.Schema:
        """The batch schema when some ``arrays`` are carried dictionaries, each marked with its
        decoded twin's bitmap (``carried_dictionary.mark_field``: Arrow's filter gives one);
        a carried array of a field that is not a whole column of the file is decoded in place."""
        fields = list(self.schema)
        if all(a.type == f.type for a, f in zip(arrays, fields, strict=True)):
            return self.schema
        for i, (a, f, plan) in enumerate(zip(arrays, fields, self.plans, strict=True)):
            if a.type == f.type:
                continue
            if isinstance(plan, _FromFile) and not plan.path:
                bitmap = filtered or twin_bitmap(batches[plan.file].schema.field(plan.top))
                fields[i] = mark_field(f, a, bitmap)
            else:
                arrays[i] = a.cast(f.type)
        return pa.schema(fields, metadata=self.schema.metadata)
