"""Listings of an Azure Blob storage container through obstore, where obstore carries the
container's reads (``io.obstore_reads``).

Why: azure-storage-blob turns a List Blobs answer into Python models at ~0.3-0.4 ms of CPU a
blob (its generated XML deserializer), so adlfs's listing of ``_versions/`` (50 manifests)
took ~18 ms after its answer arrived, a job's plan waited on it before reading the manifest, and
a vacuum's listing of 10 000 blobs would take seconds of the driver's CPU. obstore parses the
answer in Rust. Whole listings only: obstore asks no page size, so its pages are the service's
largest (5 000 blobs), and the one page of the latest versions (``ObjectStore.list_page``, 16
keys) stays on adlfs - through obstore it took 135 ms against 52 on Azurite for a table of 1 000
versions. What is listed is what pylance's object_store lists: a hierarchical-namespace
directory is no object, nor is a blob named as the prefix itself.

Every function returns None when obstore fails in any way (a missing container, a key obstore
will not parse): the caller then lists through adlfs, which names what is wrong.
"""

from __future__ import annotations

from typing import Any


def _base(prefix: str) -> str:
    """``prefix`` as a directory's key prefix: ``key/``, or "" at the container's root."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def list_dir(store: Any, prefix: str) -> list[str] | None:
    """Names of the objects and "directories" directly under ``prefix`` (``ObjectStore.list``)."""
    import obstore

    base = _base(prefix)
    try:
        got = obstore.list_with_delimiter(store, base or None)
    except Exception:  # noqa: BLE001 - see the module docstring
        return None
    names = {str(p) for p in got["common_prefixes"]} | {str(m["path"]) for m in got["objects"]}
    return sorted({n[len(base):].rstrip("/") for n in names if n.startswith(base)} - {""})


def find(store: Any, container: str, prefix: str) -> dict[str, dict[str, Any]] | None:
    """Every object under ``prefix`` (recursively), ``{container/key: info}`` with ``size``
    and ``last_modified`` (``ObjectStore.find``)."""
    import obstore

    base = _base(prefix)
    out: dict[str, dict[str, Any]] = {}
    try:
        for chunk in obstore.list(store, base or None, chunk_size=1000):
            for meta in chunk:
                name = f"{container}/{meta['path']}"
                out[name] = {"name": name, "size": int(meta["size"]), "last_modified": meta["last_modified"],
                             "type": "file"}
    except Exception:  # noqa: BLE001 - see the module docstring
        return None
    return out
