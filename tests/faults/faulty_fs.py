"""``faulty://`` - an fsspec filesystem over the local disk whose calls fail on a seeded fraction.

Two kinds of fault, decided per call by the plan named in the storage options
(``{"plan": name}``; ``install(name, FaultPlan(...))`` first):

* **transient**: the call raises ``OSError`` before touching anything;
* **ambiguous** (writes only, as lance#8123): the write lands, then the caller sees an error;
  with ``blind`` the next calls fail too, so reading back cannot tell whether it landed.

Plans live in this process (in-process runs with ``spark=None``); every filesystem instance
with the same plan name draws from one seeded generator, so a run replays from its seed.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "faulty"


class InjectedFault(OSError):
    """An error this filesystem raised on purpose."""


@dataclass
class FaultPlan:
    """Seeded fault rates; counters say what happened."""

    seed: int
    transient: float = 0.0  # fraction of calls that fail before acting
    ambiguous: float = 0.0  # fraction of writes that land and then fail
    manifest_only: bool = False  # ambiguous faults only on manifest puts (``_versions/``)
    blind: int = 0  # after an ambiguous fault the next ``blind`` calls fail too (no read-back)
    # run before the n-th manifest put (None: nothing); a concurrent writer that takes the version
    before_manifest_put: list = field(default_factory=list)
    calls: int = 0
    blind_left: int = 0
    transient_faults: int = 0
    ambiguous_faults: int = 0
    rng: random.Random = field(init=False, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def before(self, op: str, path: str) -> None:
        with self.lock:
            self.calls += 1
            hit = self.rng.random() < self.transient or self.blind_left > 0
            self.blind_left = max(0, self.blind_left - 1)
            if hit:
                self.transient_faults += 1
        if hit:
            raise InjectedFault(f"injected transient fault in {op} {path}")

    def after_write(self, op: str, path: str) -> None:
        if self.manifest_only and "/_versions/" not in path:
            return
        with self.lock:
            hit = self.rng.random() < self.ambiguous
            if hit:
                self.ambiguous_faults += 1
                self.blind_left = self.blind
        if hit:
            raise InjectedFault(f"injected ambiguous fault: {op} {path} landed, the response was lost")

    @property
    def faults(self) -> int:
        return self.transient_faults + self.ambiguous_faults


_PLANS: dict[str, FaultPlan] = {}


def install(name: str, plan: FaultPlan) -> dict[str, str]:
    """Register ``plan``; returns the storage options that select it."""
    register()
    _PLANS[name] = plan
    return {"plan": name}


def uninstall(name: str) -> None:
    _PLANS.pop(name, None)


class FaultyFileSystem(LocalFileSystem):
    """Local filesystem with injected faults on the calls ``io.storage.ObjectStore`` makes."""

    protocol = (PROTOCOL,)
    root_marker = "/"
    cachable = False

    def __init__(self, plan: str = "", **kwargs: Any) -> None:
        super().__init__(**{"auto_mkdir": True, **kwargs})  # an object store has no directories to make
        self.plan = _PLANS[plan]

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3:]
        return super()._strip_protocol(path)

    # reads and metadata: transient faults only
    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw: Any) -> bytes:
        self.plan.before("cat_file", path)
        return super().cat_file(path, start=start, end=end, **kw)

    def size(self, path: str) -> int:
        self.plan.before("size", path)
        return super().size(path)

    def ls(self, path: str, detail: bool = False, **kw: Any) -> Any:
        self.plan.before("ls", path)
        return super().ls(path, detail=detail, **kw)

    def exists(self, path: str, **kw: Any) -> bool:
        self.plan.before("exists", path)
        return super().exists(path, **kw)

    def info(self, path: str, **kw: Any) -> Any:
        return super().info(path, **kw)

    # writes: transient before, ambiguous after
    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kw: Any) -> None:
        path = self._strip_protocol(path)
        self.plan.before("pipe_file", path)
        if path.endswith(".manifest") and self.plan.before_manifest_put:
            action = self.plan.before_manifest_put.pop(0)
            if action is not None:
                action()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-faulty-{os.getpid()}-{os.urandom(4).hex()}"
        with open(tmp, "wb") as f:
            f.write(value)
        try:
            if mode == "create":
                os.link(tmp, path)  # atomic create-if-absent; FileExistsError when taken
            else:
                os.replace(tmp, path)
                tmp = ""
        finally:
            if tmp:
                os.unlink(tmp)
        self.plan.after_write("pipe_file", path)

    def open(self, path: str, mode: str = "rb", **kw: Any) -> Any:
        self.plan.before(f"open({mode})", path)
        return super().open(path, mode=mode, **kw)

    def rm_file(self, path: str) -> None:
        self.plan.before("rm_file", path)
        super().rm_file(path)
        self.plan.after_write("rm_file", self._strip_protocol(path))

    def copy(self, path1: str, path2: str, **kw: Any) -> None:
        self.plan.before("copy", path1)
        super().copy(path1, path2, **kw)


def register() -> None:
    """Make ``fsspec.filesystem("faulty")`` this class (idempotent), and let the library treat it
    as a store with a conditional put (``pipe_file(mode="create")`` is atomic here) where it keeps
    a list of such protocols."""
    fsspec.register_implementation(PROTOCOL, FaultyFileSystem, clobber=True)
    from lance_spark_ops.io import storage

    known = getattr(storage, "_CONDITIONAL_PUT", None)
    if isinstance(known, frozenset | set) and PROTOCOL not in known:
        storage._CONDITIONAL_PUT = frozenset(known | {PROTOCOL})
