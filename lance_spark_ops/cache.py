"""The one cache of a process (issue #38): every memo the library keeps between calls - parsed
file metadata, schemas and page layouts, decoder prototypes, opened dataset versions, sample
files, row-id index parts - is a named ``Region`` of one ``CacheOwner``, least recently used
first out, all of them within one byte budget.

A region may also cap its own entries, its own bytes or the size of an entry it keeps (an
entry above that is not cached). Callers give each entry's size in bytes (an estimate for
parsed objects). The budget is the process's: ``LSO_CACHE_BYTES`` or ``DEFAULT_BUDGET`` at
start, then what the running job hands its tasks (``Tuning.cache_bytes`` -> ``TaskContext``
-> ``configure``). Thread-safe (a lock per owner). No I/O, no imports from the package.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Any

__all__ = ["DEFAULT_BUDGET", "CacheOwner", "Region", "configure", "parsed_size", "process_cache", "region"]

DEFAULT_BUDGET = 1 << 30  # bytes: the sum of the regions' own caps, plus room for datasets
_MISSING = object()


def parsed_size(raw_bytes: int) -> int:
    """The bytes charged for an object parsed from ``raw_bytes`` of wire format (protobuf
    messages, schema trees: a few times their encoded size)."""
    return 4 * raw_bytes + 256


class Region:
    """One named part of a ``CacheOwner`` (get / put / pop / clear; iterates over its keys)."""

    def __init__(self, owner: CacheOwner, name: str, max_entries: int | None, max_bytes: int | None,
                 max_entry_bytes: int | None) -> None:
        self.owner, self.name = owner, name
        self.max_entries, self.max_bytes, self.max_entry_bytes = max_entries, max_bytes, max_entry_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, list[Any]] = OrderedDict()  # key -> [value, bytes, tick]

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value under ``key`` (now the most recently used), or ``default``."""
        with self.owner.lock:
            hit = self._entries.get(key, _MISSING)
            if hit is _MISSING:
                return default
            self._entries.move_to_end(key)
            hit[2] = next(self.owner.ticks)
            return hit[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        """Keep ``value`` (``nbytes`` big) unless it is larger than the region takes; evicts the
        least recently used entries over the region's caps and the owner's budget."""
        if self.max_entry_bytes is not None and nbytes > self.max_entry_bytes:
            return
        owner = self.owner
        with owner.lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._forget(old[1])
            self._entries[key] = [value, nbytes, next(owner.ticks)]
            self.bytes += nbytes
            owner.used += nbytes
            while self._over_caps():
                self._pop_oldest()
            owner.fit()

    def pop(self, key: Hashable, default: Any = None) -> Any:
        with self.owner.lock:
            hit = self._entries.pop(key, None)
            if hit is None:
                return default
            self._forget(hit[1])
            return hit[0]

    def clear(self) -> None:
        with self.owner.lock:
            self.owner.used -= self.bytes
            self.bytes = 0
            self._entries.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    # -- owner side (lock held) ------------------------------------------------------------------
    def _over_caps(self) -> bool:
        n = len(self._entries)
        return n > 0 and ((self.max_entries is not None and n > self.max_entries)
                          or (self.max_bytes is not None and self.bytes > self.max_bytes and n > 1))

    def _oldest_tick(self) -> int | None:
        return next(iter(self._entries.values()))[2] if self._entries else None

    def _pop_oldest(self) -> None:
        _, entry = self._entries.popitem(last=False)
        self._forget(entry[1])

    def _forget(self, nbytes: int) -> None:
        self.bytes -= nbytes
        self.owner.used -= nbytes


class CacheOwner:
    """The regions of one process and their shared byte budget."""

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self.budget = int(budget)
        self.used = 0
        self.lock = threading.RLock()
        self.ticks = itertools.count()
        self._regions: dict[str, Region] = {}

    def region(self, name: str, *, max_entries: int | None = None, max_bytes: int | None = None,
               max_entry_bytes: int | None = None) -> Region:
        """The region ``name`` (made on first use with these caps)."""
        with self.lock:
            r = self._regions.get(name)
            if r is None:
                r = self._regions[name] = Region(self, name, max_entries, max_bytes, max_entry_bytes)
            return r

    def configure(self, budget: int) -> None:
        """A new byte budget (entries over it leave now)."""
        with self.lock:
            self.budget = int(budget)
            self.fit()

    def fit(self) -> None:
        """Evict the least recently used entries (over all regions) until within the budget."""
        with self.lock:
            while self.used > self.budget:
                live = [(t, r) for r in self._regions.values() if (t := r._oldest_tick()) is not None]
                if not live:
                    return
                min(live, key=lambda tr: tr[0])[1]._pop_oldest()

    def clear(self) -> None:
        with self.lock:
            for r in self._regions.values():
                r.clear()

    def stats(self) -> dict[str, tuple[int, int]]:
        """Per region: (entries, bytes)."""
        with self.lock:
            return {name: (len(r), r.bytes) for name, r in self._regions.items()}


def _initial_budget() -> int:
    raw = os.environ.get("LSO_CACHE_BYTES", "")
    return int(raw) if raw.isdigit() else DEFAULT_BUDGET


_PROCESS = CacheOwner(_initial_budget())


def process_cache() -> CacheOwner:
    """This process's cache owner."""
    return _PROCESS


def region(name: str, *, max_entries: int | None = None, max_bytes: int | None = None,
           max_entry_bytes: int | None = None) -> Region:
    """A region of the process's cache (see ``CacheOwner.region``)."""
    return _PROCESS.region(name, max_entries=max_entries, max_bytes=max_bytes,
                           max_entry_bytes=max_entry_bytes)


def configure(budget: int | None) -> None:
    """Set the process's byte budget (None: leave it as it is)."""
    if budget is not None and budget != _PROCESS.budget:
        _PROCESS.configure(budget)
