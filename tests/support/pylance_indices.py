"""pylance's index segments in the shape of its deprecated ``list_indices``, read through
``describe_indices`` (pylance 14 warns on every ``list_indices`` call)."""

from __future__ import annotations

from typing import Any


def index_segments(ds: Any) -> list[dict[str, Any]]:
    """One dict per index segment of the pylance dataset ``ds``, with the keys and values
    pylance 14's ``list_indices`` builds from the same descriptions."""
    return [
        {
            "name": desc.name,
            "type": desc.index_type,
            "uuid": seg.uuid,
            "fields": desc.field_names,
            "version": seg.dataset_version_at_last_update,
            "fragment_ids": seg.fragment_ids,
            "base_id": seg.base_id,
        }
        for desc in ds.describe_indices()
        for seg in desc.segments
    ]
