"""The base of every index family's build parameters (issue #38): a frozen, typed dataclass,
parsed and checked once where ``create_index`` / ``optimize_indices`` (and the CLI) receive
pylance's loose keyword arguments, then handed down typed to builders and tasks (no I/O).

Code reads the fields (``params.num_partitions``). The same object is also a read-only
mapping under pylance's parameter names, in field order (``params["num_partitions"]``,
``dict(params)``), because that is how the names are written into index files (the FTS
``metadata.lance`` params JSON) and how callers compare a build's parameters.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, eq=False)
class IndexParams(Mapping[str, Any]):
    """A family's checked parameters; subclasses declare the fields (``eq=False`` keeps the
    mapping's equality: equal to any mapping of the same names and values)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """pylance's names of the parameters, in field order."""
        return tuple(f.name for f in fields(cls))

    def __getitem__(self, key: str) -> Any:
        if key not in self.names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def as_dict(self) -> dict[str, Any]:
        """A plain dict of the parameters (nested parameter sets as dicts too), in field order."""
        return {k: v.as_dict() if isinstance(v, IndexParams) else v for k, v in self.items()}


@dataclass(frozen=True, eq=False)
class NoParams(IndexParams):
    """The kinds that take no parameters (BITMAP, LABEL_LIST, NGRAM)."""
