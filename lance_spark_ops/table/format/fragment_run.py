"""``FragmentRun``: the fragments of a manifest as protobuf wire bytes, with their counts as arrays.

A manifest read from bytes keeps its fragments as the run they were stored in (``Manifest.fragments``
entries: tag, length, body, back to back). A commit that keeps most fragments as they were (a
fragment-id reservation, an index change, a Rewrite of 100 000 small fragments into 10) takes
the kept ones by position and appends the few new ones, and the next manifest writes the run
as it is: no Python object per fragment, a handful of numpy passes and byte copies.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.fragment_columns import (
    FragmentColumns,
    IrregularWire,
    encode_varint,
    entry_ends,
    fragment_columns,
)

MANIFEST_FRAGMENTS_FIELD = 2  # Manifest.fragments


class FragmentRun:
    """Fragments as wire bytes: ``run`` holds each one as a ``Manifest.fragments`` entry (tag,
    length, body); entry ``i`` is ``run[offsets[i]:offsets[i + 1]]``, its body ``bodies[i]``;
    ``columns`` are their counts. Immutable: operations return new runs. ``layout``: where a
    run parsed from a manifest file lies in it (``Manifest.fragment_slice``), else None."""

    __slots__ = ("bodies", "columns", "layout", "offsets", "order", "run")

    def __init__(self, bodies: list[bytes], columns: FragmentColumns, run: bytes,
                 offsets: np.ndarray) -> None:
        self.bodies, self.columns, self.run, self.offsets = bodies, columns, run, offsets
        self.layout: Any = None
        self.order: np.ndarray | None = None  # positions sorted by fragment id, made on first use

    def __len__(self) -> int:
        return len(self.bodies)

    @classmethod
    def of_bodies(cls, bodies: list[bytes], columns: FragmentColumns | None = None) -> FragmentRun:
        """From the fragments' serialized protobufs (IrregularWire when the walk cannot read them)."""
        offsets = np.zeros(len(bodies) + 1, np.int64)
        offsets[1:] = entry_ends(bodies)
        tag = bytes([(MANIFEST_FRAGMENTS_FIELD << 3) | 2])
        parts = []
        for b in bodies:
            parts += (tag, encode_varint(len(b)), b)
        columns = columns if columns is not None else fragment_columns(bodies)
        return cls(bodies, columns, b"".join(parts), offsets)

    @classmethod
    def of_fragments(cls, fragments: list[DataFragment]) -> FragmentRun | None:
        """Fragment objects serialized (a commit's few new fragments); None when any holds a
        field the walk does not read (the caller then takes the object path)."""
        bodies = [f.to_pb().SerializeToString() for f in fragments]
        try:
            run = cls.of_bodies(bodies)
        except IrregularWire:
            return None
        return run if run.columns.clean else None

    def build(self, ids: set[int] | None = None) -> list[DataFragment]:
        """Lazy fragment objects of every fragment (or of those with ``ids``), run order."""
        c = self.columns
        if ids is None:
            return DataFragment.lazy_bytes(c.id.tolist(), self.bodies, c.has_deletion.tolist(),
                                           c.has_row_ids.tolist())
        at = np.flatnonzero(np.isin(c.id, np.fromiter(ids, np.int64, len(ids))))
        return DataFragment.lazy_bytes(c.id[at].tolist(), [self.bodies[i] for i in at.tolist()],
                                       c.has_deletion[at].tolist(), c.has_row_ids[at].tolist())

    def build_at(self, at: np.ndarray) -> list[DataFragment]:
        """Lazy fragment objects of the fragments at run positions ``at``, in that order."""
        c = self.columns
        return DataFragment.lazy_bytes(c.id[at].tolist(), [self.bodies[i] for i in at.tolist()],
                                       c.has_deletion[at].tolist(), c.has_row_ids[at].tolist())

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Position of each of ``ids`` in the run; -1 where absent (the sort made once: a job
        asks it for each of its tasks)."""
        col = self.columns.id
        if self.order is None:
            self.order = np.argsort(col, kind="stable")
        if not len(col):
            return np.full(len(ids), -1, np.int64)
        pos = self.order[np.minimum(np.searchsorted(col[self.order], ids), len(col) - 1)]
        return np.where(col[pos] == ids, pos, -1)

    def entry_ends(self) -> np.ndarray:
        """Where each entry ends, from the run's start."""
        return self.offsets[1:]

    def take(self, positions: np.ndarray) -> FragmentRun:
        """The fragments at ``positions`` (in that order); adjacent ones are copied as one slice."""
        positions = np.asarray(positions, np.intp)
        n = len(positions)
        if n == len(self) and bool((positions == np.arange(n)).all()):
            return self
        starts, ends = self.offsets[positions], self.offsets[positions + 1]
        if n:
            cut = np.flatnonzero(starts[1:] != ends[:-1]) + 1  # where a new slice begins
            first, last = starts[np.r_[0, cut]].tolist(), ends[np.r_[cut - 1, n - 1]].tolist()
            view = memoryview(self.run)
            run = b"".join(view[s:e] for s, e in zip(first, last, strict=True))
        else:
            run = b""
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        bodies = self.bodies
        return FragmentRun([bodies[i] for i in positions.tolist()], self.columns.take(positions), run,
                           offsets)

    def concat(self, other: FragmentRun) -> FragmentRun:
        if not len(other):
            return self
        offsets = np.concatenate([self.offsets, self.offsets[-1] + other.offsets[1:]])
        return FragmentRun(self.bodies + other.bodies, self.columns.concat(other.columns),
                           self.run + other.run, offsets)

    def sorted_by_id(self) -> FragmentRun:
        """Ordered by fragment id (stable), as every new manifest is."""
        ids = self.columns.id
        if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):
            return self
        return self.take(np.argsort(ids, kind="stable"))

    def wire(self, field_number: int) -> bytes:
        """The run as entries of another repeated ``DataFragment`` field numbered below 16 (a
        Rewrite group's ``old_fragments`` = 1): the same bytes, each entry's tag byte changed."""
        tag = (field_number << 3) | 2
        if not 0 < field_number < 16:
            raise ValueError(f"field number {field_number} does not fit one tag byte")
        if field_number == MANIFEST_FRAGMENTS_FIELD or not len(self):
            return self.run
        buf = bytearray(self.run)
        np.frombuffer(buf, np.uint8)[self.offsets[:-1]] = tag
        return bytes(buf)


class RunFragments(Sequence[DataFragment]):
    """Fragments of a ``FragmentRun`` as a read-only sequence (a Rewrite group's old fragments):
    ids and wire bytes at hand, the fragment objects built on first use of an item. Never
    changed in place, so the wire bytes stay those of the items."""

    __slots__ = ("_items", "run")

    def __init__(self, run: FragmentRun) -> None:
        self.run = run
        self._items: list[DataFragment] | None = None

    @property
    def ids(self) -> np.ndarray:
        return self.run.columns.id

    def _built(self) -> list[DataFragment]:
        if self._items is None:
            self._items = self.run.build()
        return self._items

    def __len__(self) -> int:
        return len(self.run)

    def __getitem__(self, i: Any) -> Any:
        return self._built()[i]

    def __iter__(self) -> Iterator[DataFragment]:
        return iter(self._built())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RunFragments({len(self)} fragments)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (self._built(),))  # pickled / copied as the plain list it stands for


def fragment_ids(fragments: Sequence[DataFragment]) -> np.ndarray:
    """The fragments' ids as int64 (a ``RunFragments``: no object built)."""
    if isinstance(fragments, RunFragments):
        return fragments.ids
    return np.fromiter((f.id for f in fragments), np.int64, len(fragments))
