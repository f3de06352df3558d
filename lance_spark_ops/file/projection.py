"""Column selection shared by the file readers (2.x and legacy 0.1): names -> top-level field
indices of the file's Arrow schema, and the projected schema."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from lance_spark_ops.errors import NotFoundError


class ColumnSelection:
    """Mixin for readers that have ``schema`` (Arrow) and ``path``."""

    schema: pa.Schema
    path: str

    def _field_indices(self, columns: Sequence[str] | None) -> list[int]:
        if columns is None:
            return list(range(len(self.schema)))
        out = []
        for name in columns:
            i = self.schema.get_field_index(name)
            if i < 0:
                raise NotFoundError(f"no column {name!r} (columns: {self.schema.names})", path=self.path)
            out.append(i)
        return out

    def _project_schema(self, fields: list[int]) -> pa.Schema:
        return pa.schema([self.schema.field(i) for i in fields], metadata=self.schema.metadata)
