"""The byte budget bounds what a task holds, counted (not timed) through fake async stores: the
prefetch never holds more than its share and keeps the objects the task is reading (no direct
read of a prefetched object), the upload never has more parts in flight than its window, and a
task reading 10x more objects, or writing 10x more parts, holds no more."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest
from fsspec.asyn import get_loop

from lance_spark_ops.io.budget import MIB, IOBudget, prefetch_share, upload_share, upload_window, writer_share
from lance_spark_ops.io.prefetch import Prefetcher
from lance_spark_ops.io.remote import S3Upload

OBJECT = 64 * 1024


class _FakeReads:
    """An async filesystem whose objects are ``OBJECT`` bytes each; counts reads."""

    async_impl = True

    def __init__(self) -> None:
        self.loop = get_loop()
        self.reads = 0

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        self.reads += 1
        await asyncio.sleep(0)
        return path.encode().ljust(OBJECT, b".")


def _read_like_a_rewrite(n: int, budget: IOBudget) -> tuple[Prefetcher, _FakeReads]:
    """Schedule ``n`` objects, then read each twice (footer, pages) and release it, in order."""
    fs = _FakeReads()
    p = Prefetcher(fs, budget)
    paths = [f"bucket/data/{i:05d}.lance" for i in range(n)]
    p.schedule([(path, OBJECT) for path in paths])
    try:
        for path in paths:
            for _ in range(2):
                data = p.get(path)
                assert data is not None, f"{path} was dropped while the task read it"
                assert bytes(data[:len(path)]) == path.encode()
                assert p._bytes <= p.max_bytes  # noqa: SLF001 - the bound is the point
            p.release([path])
    finally:
        p.close()
    return p, fs


def test_prefetch_within_its_share_and_flat_in_object_count() -> None:
    budget = IOBudget(max_requests=64, max_bytes=12 * MIB, part_bytes=5 * MIB)
    assert upload_share(budget) == 10 * MIB
    small, fs_small = _read_like_a_rewrite(40, budget)
    big, fs_big = _read_like_a_rewrite(400, budget)
    assert small.max_bytes == big.max_bytes == prefetch_share(budget) == 2 * MIB  # what is left
    # every object fetched once, read from the prefetch (no direct read)
    assert (fs_small.reads, small.hits, fs_big.reads, big.hits) == (40, 80, 400, 800)
    # 40 objects of 64 KiB already fill the share: 10x more hold no more
    assert small.peak_bytes == big.peak_bytes == 2 * MIB


def test_shares_of_the_budget() -> None:
    """Upload and prefetch split the byte budget (the upload's two-part floor aside); the
    writer's pages take half of it besides, at most 8 MiB."""
    for max_bytes, part, writer in [(64 * MIB, 8 * MIB, 8 * MIB), (128 * MIB, 8 * MIB, 8 * MIB),
                                    (1 << 30, 8 * MIB, 8 * MIB), (32 * MIB, 5 * MIB, 8 * MIB),
                                    (12 * MIB, 5 * MIB, 6 * MIB), (4 * MIB, 5 * MIB, 2 * MIB)]:
        b = IOBudget(32, max_bytes, part)
        if max_bytes >= 2 * part:
            assert upload_share(b) + prefetch_share(b) == max_bytes
        assert writer_share(b) == writer
    b = IOBudget(32, 64 * MIB)
    assert (upload_share(b), prefetch_share(b), writer_share(b)) == (32 * MIB, 32 * MIB, 8 * MIB)


def test_prefetch_keeps_what_is_read_until_released() -> None:
    """Objects read and not released are kept while they hold at most half the share; beyond
    that the least recently read go first (a caller that never releases still gets ahead)."""
    budget = IOBudget(max_requests=64, max_bytes=12 * MIB, part_bytes=5 * MIB)
    fs = _FakeReads()
    p = Prefetcher(fs, budget)
    paths = [f"bucket/data/{i:05d}.lance" for i in range(100)]
    p.schedule([(path, OBJECT) for path in paths])
    try:
        for path in paths:  # read once, never released
            assert p.get(path) is not None
            assert p._bytes <= p.max_bytes and p._in_use <= p.max_bytes  # noqa: SLF001
        assert fs.reads == 100 and p.hits == 100
        assert p.get(paths[-1]) is not None  # the latest ones are still held
    finally:
        p.close()


class _FakeMultipart:
    """An async S3 filesystem whose part uploads are held until ``window`` are in flight (or
    the last part is sent): the upload's window is reached every time, deterministically.
    ``slow_first``: part 1 is held until the last part is sent, the others end at once."""

    async_impl = True

    def __init__(self, window: int, parts: int, slow_first: bool = False) -> None:
        self.loop = get_loop()
        self.window, self.parts, self.slow_first = window, parts, slow_first
        self.started = self.in_flight = self.max_in_flight = 0
        self.bodies: dict[int, bytes] = {}
        self._go: asyncio.Event | None = None
        self._last: asyncio.Event | None = None

    def split_path(self, path: str) -> tuple[str, str, None]:
        bucket, _, key = path.partition("/")
        return bucket, key, None

    def invalidate_cache(self, path: str) -> None:
        return None

    async def _bulk_delete(self, *a: Any, **k: Any) -> None:  # makes it look like s3fs
        return None

    async def _call_s3(self, method: str, **kw: Any) -> dict[str, Any]:
        if method == "create_multipart_upload":
            return {"UploadId": "u"}
        if method == "complete_multipart_upload":
            return {}
        assert method == "upload_part", method
        number, data = kw["PartNumber"], bytes(kw["Body"])
        self.started += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self._last is None:
            self._last = asyncio.Event()
        if self.started == self.parts:
            self._last.set()
        if self.slow_first:
            if number == 1:
                await self._last.wait()
        else:
            if self._go is None or self._go.is_set():
                self._go = asyncio.Event()
            go = self._go
            if self.in_flight >= self.window or self.started == self.parts:
                go.set()
            await go.wait()
        self.in_flight -= 1
        self.bodies[number] = data
        return {"ETag": f'"{number}"'}


class _CountedUpload(S3Upload):
    """Counts the part-sized bodies the upload holds besides the one being filled (in flight
    or sent and not dropped, spares) each time it takes a fresh body."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.max_held = 0

    def _fresh(self) -> bytearray:
        body = super()._fresh()
        held = sum(len(b) > 0 for b in self._bodies) + len(self._spare)
        self.max_held = max(self.max_held, held)
        return body


def _upload(parts: int, budget: IOBudget, slow_first: bool = False) -> tuple[_FakeMultipart, _CountedUpload]:
    part = budget.part_bytes
    fs = _FakeMultipart(upload_window(budget), parts, slow_first)
    up = _CountedUpload(fs, "bucket/out.lance", budget)
    payload = bytes(range(256)) * (parts * part // 256)
    for i in range(0, len(payload), MIB):  # the writer's pages: 1 MiB each
        up.write(payload[i:i + MIB])
    up.close()
    assert fs.started == parts
    assert b"".join(fs.bodies[k] for k in sorted(fs.bodies)) == payload
    return fs, up


@pytest.mark.parametrize("max_mib", [64, 24])
def test_upload_parts_in_flight_within_its_window_and_flat_in_size(max_mib: int) -> None:
    budget = IOBudget(max_requests=32, max_bytes=max_mib * MIB, part_bytes=5 * MIB)
    window = upload_window(budget)
    assert (window + 1) * budget.part_bytes <= upload_share(budget)  # in flight + the one filled
    # at least three parts: two are one PUT (``PartStream``)
    (small, up_small), (big, up_big) = _upload(max(3, 2 * window), budget), _upload(20 * window, budget)
    assert small.max_in_flight == big.max_in_flight == window
    # bodies held: those in flight (or just sent) and at most two spares, whatever the size
    assert up_small.max_held <= window + 2 and up_big.max_held <= window + 2


def test_upload_drops_bodies_sent_after_a_slow_part() -> None:
    """A slow part does not keep the bodies of the parts sent after it: 10x more parts behind
    it hold no more."""
    budget = IOBudget(max_requests=32, max_bytes=64 * MIB, part_bytes=5 * MIB)
    window = upload_window(budget)
    held = [_upload(n, budget, slow_first=True)[1].max_held for n in (2 * window, 20 * window)]
    assert max(held) <= window + 2, held


def test_part_body_hands_aiohttp_a_view() -> None:
    """aiohttp sends a body as ``body[:length]``: for a part's body that is a view of it, not
    an 8 MiB copy per part being sent; other slices stay copies."""
    from lance_spark_ops.io.remote import PartBody

    body = PartBody(b"abcdef")
    view = body[:len(body)]
    assert isinstance(view, memoryview) and bytes(view) == b"abcdef"
    body[0:1] = b"z"
    assert bytes(view) == b"zbcdef"  # the same bytes
    view.release()
    assert body[1:3] == bytearray(b"bc") and not isinstance(body[1:3], memoryview)
    assert body[0] == ord("z") and isinstance(body, bytearray)


def test_upload_window_takes_the_whole_budget_once_reading_is_over() -> None:
    """Beside a prefetch an upload keeps to half the byte budget; once the task has read its
    last input (the store's prefetch stopped) the parts left go out together, still within it."""
    budget = IOBudget(max_requests=32, max_bytes=64 * MIB, part_bytes=8 * MIB)
    half, whole = upload_window(budget), upload_window(budget, whole=True)
    assert (half, whole) == (3, 7)
    assert (whole + 1) * budget.part_bytes <= budget.max_bytes
    fs = _FakeMultipart(whole, 2 * whole)
    up = S3Upload(fs, "bucket/out.lance", budget, window=lambda: whole)
    up.write(bytes(2 * whole * budget.part_bytes))
    up.close()
    assert fs.max_in_flight == whole


@pytest.mark.parametrize(("max_mib", "prefetch_with_8_mib_parts"),
                         [(64, 32 * MIB), (32, 16 * MIB), (24, 8 * MIB), (16, 1), (8, 1), (256, 128 * MIB)])
def test_part_size_default_and_override(monkeypatch: pytest.MonkeyPatch, max_mib: int,
                                        prefetch_with_8_mib_parts: int) -> None:
    """Unset, the part size is S3's smallest, 5 MiB, whatever the budget: a 16 MiB budget keeps
    6 MiB for the prefetch (8 MiB parts left it one byte); a part size set in the environment
    is taken as it is."""
    from lance_spark_ops.io.budget import io_budget, prefetch_share

    monkeypatch.setenv("LSO_IO_MAX_BYTES", str(max_mib * MIB))
    monkeypatch.delenv("LSO_IO_PART_BYTES", raising=False)
    budget = io_budget(local=False)
    assert budget.part_bytes == 5 * MIB
    if max_mib >= 16:
        assert prefetch_share(budget) >= max_mib * MIB // 4
    monkeypatch.setenv("LSO_IO_PART_BYTES", str(8 * MIB))
    assert io_budget(local=False).part_bytes == 8 * MIB
    assert prefetch_share(io_budget(local=False)) == prefetch_with_8_mib_parts


def test_store_widens_its_uploads_when_the_prefetch_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_spark_ops.io.storage import ObjectStore

    monkeypatch.delenv("LSO_IO_MAX_BYTES", raising=False)
    monkeypatch.delenv("LSO_IO_PART_BYTES", raising=False)
    store = ObjectStore("s3://bucket/ds.lance", {"aws_access_key_id": "k", "aws_secret_access_key": "s",
                                                 "aws_region": "us-east-1",
                                                 "aws_endpoint": "http://127.0.0.1:9"})
    half, whole = upload_window(store.budget), upload_window(store.budget, whole=True)
    assert half < whole
    store._prefetcher = Prefetcher(_FakeReads(), store.budget)  # noqa: SLF001 - a task reading
    assert store._upload_window() == half  # noqa: SLF001
    store.stop_prefetch()
    assert store._upload_window() == whole  # noqa: SLF001


class _FreshBodies(S3Upload):
    """Records every body ``_fresh`` hands out (held: a freed body's id could come back)."""

    handed: list[bytearray] = []

    def _fresh(self) -> bytearray:
        body = super()._fresh()
        self.handed.append(body)
        return body


def test_finished_uploads_leave_their_bodies_to_the_next() -> None:
    """A finished upload's part bodies serve the process's next upload (a fresh 8 MiB body is
    page-faulted in as it fills), at most the byte budget of them; a failed upload's are not
    kept (a cancelled part may still be sending one)."""
    from lance_spark_ops.io.remote import KEPT_BODIES

    KEPT_BODIES.clear()
    budget = IOBudget(max_requests=32, max_bytes=16 * MIB, part_bytes=5 * MIB)
    part, window = budget.part_bytes, upload_window(budget)
    first = _FreshBodies(_FakeMultipart(window, 6), "bucket/a.lance", budget)
    first.write(bytes(6 * part))
    first.close()
    kept = list(KEPT_BODIES._free)  # noqa: SLF001
    assert 0 < len(kept) * part <= budget.max_bytes
    assert all(any(k is b for b in first.handed) for k in kept)
    _FreshBodies.handed = []
    # all four parts in flight until the last is sent: no part of its own is over to reuse, so
    # each new part takes a kept body while one is left (a part over first would be reused)
    fs = _FakeMultipart(4, 4)
    second = _FreshBodies(fs, "bucket/b.lance", budget, window=lambda: 4)
    payload = bytes(range(256)) * (4 * part // 256)
    second.write(payload)
    second.close()
    assert all(any(b is k for b in second.handed) for k in kept)  # every kept body filled again
    assert b"".join(fs.bodies[k] for k in sorted(fs.bodies)) == payload

    class _Failing(_FakeMultipart):
        async def _call_s3(self, method: str, **kw: Any) -> dict[str, Any]:
            if method == "upload_part" and kw["PartNumber"] == 2:
                raise OSError("reset")
            return await super()._call_s3(method, **kw)

    KEPT_BODIES.clear()
    failed = S3Upload(_Failing(1, 3), "bucket/c.lance", budget)
    with pytest.raises(OSError):
        failed.write(bytes(3 * part))
        failed.close()
    failed.discard()
    assert KEPT_BODIES._free == []  # noqa: SLF001


def test_discard_aborts_after_the_parts_in_flight_are_over() -> None:
    """A part's request can take a while to end after its cancel: ``discard`` sends the abort
    only after every part that had started is over, so none of its requests is still running
    beside an aborted upload."""

    class _SlowToStop(_FakeMultipart):
        def __init__(self) -> None:
            super().__init__(window=8, parts=100)
            self.events: list[str] = []
            self.three_running = threading.Event()  # three parts' requests have begun

        async def _call_s3(self, method: str, **kw: Any) -> dict[str, Any]:
            if method == "abort_multipart_upload":
                self.events.append("abort")
                return {}
            if method != "upload_part":
                return await super()._call_s3(method, **kw)
            self.started += 1
            if self.started == 3:
                self.three_running.set()
            try:
                await asyncio.Event().wait()  # held until cancelled
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)  # the request's end, after its cancel
                self.events.append(f"part {kw['PartNumber']} over")
                raise
            raise AssertionError("never set")

    part = 5 * MIB
    budget = IOBudget(max_requests=64, max_bytes=8 * part, part_bytes=part)
    fs = _SlowToStop()
    up = S3Upload(fs, "bucket/d.lance", budget, window=lambda: 4)
    up.write(bytes(3 * part + 1))  # three parts started, the fourth being filled
    # the parts' requests running before the discard (the first two are sent together once the
    # third begins: a cancel could otherwise stop one before its request began)
    assert fs.three_running.wait(30)
    up.discard()
    assert sorted(fs.events) == ["abort", "part 1 over", "part 2 over", "part 3 over"], fs.events
    assert fs.events[-1] == "abort", fs.events


def test_prefetch_fetches_an_object_asked_out_of_turn_and_drops_nothing_unread() -> None:
    """A rewrite asks for a slice's deletion files before that slice's data files. An object
    asked before its fetch started (the share full of objects fetched ahead) is fetched at
    once, past the share by that object only; the objects fetched before it stay unread and
    held, so each is still one fetch and every read a hit (no direct read)."""
    budget = IOBudget(max_requests=64, max_bytes=12 * MIB, part_bytes=5 * MIB)
    fs = _FakeReads()
    p = Prefetcher(fs, budget)
    per_share = p.max_bytes // OBJECT  # objects the share holds
    paths = [f"bucket/data/{i:05d}.lance" for i in range(per_share + 8)]
    p.schedule([(path, OBJECT) for path in paths])
    try:
        late = paths[per_share + 4]  # queued: the share is full of the ones before it
        assert p.get(late) is not None and p._bytes <= p.max_bytes + OBJECT  # noqa: SLF001
        for path in paths:
            assert p.get(path) is not None, path
            p.release([path])
        assert fs.reads == len(paths) and p.hits == len(paths) + 1
    finally:
        p.close()


class _FakeObstoreWriter:
    """obstore's multipart writer as seen from Python: ``write`` keeps a reference to the body
    while its part is in flight (as the buffer export does) and, with ``max_concurrency`` parts
    in flight, first completes the oldest (or, ``slow_first``, the oldest but the first part,
    which ends at ``close``). A part's bytes are taken when it completes, as a real upload sends
    them while in flight: a body filled again too early would show in the object."""

    def __init__(self, max_concurrency: int, slow_first: bool) -> None:
        self.max_concurrency, self.slow_first = max_concurrency, slow_first
        self.in_flight: list[tuple[int, Any]] = []
        self.parts: dict[int, bytes] = {}
        self.max_in_flight = 0

    def _complete(self, i: int) -> None:
        number, body = self.in_flight.pop(i)
        self.parts[number] = bytes(body)

    def write(self, body: Any) -> int:
        if len(self.in_flight) >= self.max_concurrency:
            first_held = self.slow_first and self.in_flight[0][0] == 1 and len(self.in_flight) > 1
            self._complete(1 if first_held else 0)
        self.in_flight.append((len(self.parts) + len(self.in_flight) + 1, body))
        self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
        return len(body)

    def close(self) -> None:
        while self.in_flight:
            self._complete(0)


def _obstore_upload(monkeypatch: pytest.MonkeyPatch, parts: int, budget: IOBudget,
                    slow_first: bool = False) -> tuple[_FakeObstoreWriter, list[int]]:
    import obstore

    from lance_spark_ops.io import remote
    from lance_spark_ops.io.obstore_writes import ObstoreUpload

    writers: list[_FakeObstoreWriter] = []

    def open_writer(store: Any, key: str, *, buffer_size: int, max_concurrency: int) -> _FakeObstoreWriter:
        assert buffer_size == budget.part_bytes
        writers.append(_FakeObstoreWriter(max_concurrency, slow_first))
        return writers[-1]

    monkeypatch.setattr(obstore, "open_writer", open_writer)
    remote.KEPT_BODIES.clear()
    made: list[int] = []
    take, kept = type(remote.KEPT_BODIES).take, remote.KEPT_BODIES
    monkeypatch.setattr(kept, "take", lambda size: made.append(size) or take(kept, size))
    up = ObstoreUpload(object(), "out.lance", budget)
    # no two parts alike: a body filled again while in flight changes the object
    rng = np.random.default_rng(parts)
    payload = rng.integers(0, 255, parts * budget.part_bytes, dtype=np.uint8).tobytes()
    for i in range(0, len(payload), MIB):  # the writer's pages: 1 MiB each
        up.write(payload[i:i + MIB])
    up.close()
    (w,) = writers
    assert b"".join(w.parts[k] for k in sorted(w.parts)) == payload and up.parts_uploaded == parts
    remote.KEPT_BODIES.clear()
    return w, made


@pytest.mark.parametrize("slow_first", [False, True])
@pytest.mark.parametrize("max_mib", [64, 24])
def test_obstore_upload_within_its_share_and_flat_in_size(monkeypatch: pytest.MonkeyPatch, max_mib: int,
                                                           slow_first: bool) -> None:
    """Through obstore the upload holds the parts in flight, the one waiting for them and the
    one being filled: within ``upload_share``, and no more for 10x the parts (a body is filled
    again only once obstore let it go, or the object's bytes would differ)."""
    budget = IOBudget(max_requests=32, max_bytes=max_mib * MIB, part_bytes=5 * MIB)
    window = upload_window(budget)
    small, made_small = _obstore_upload(monkeypatch, max(3, 2 * window), budget, slow_first)  # two: one PUT
    big, made_big = _obstore_upload(monkeypatch, 20 * window, budget, slow_first)
    assert small.max_in_flight == big.max_in_flight == max(1, window - 1)
    assert (window + 1) * budget.part_bytes <= upload_share(budget)
    # how many of them are made first depends on how far the hand-over thread got: the bound
    # does not (never reused, the bodies would be one per part: 10x more for the larger upload)
    assert len(made_small) <= window + 1 and len(made_big) <= window + 1, (made_small, made_big)


@pytest.mark.parametrize(("extra", "carried"), [
    ({}, True),
    ({"timeout": "30s", "client_max_retries": "4", "aws_conditional_put": "etag"}, True),
    ({"aws_server_side_encryption": "aws:kms", "aws_sse_kms_key_id": "k"}, False),
    ({"aws_checksum_algorithm": "SHA256"}, False),
    ({"s3_additional_kwargs": {"ServerSideEncryption": "AES256"}}, False),
    ({"aws_profile": "p"}, False),
])
def test_uploads_leave_options_obstore_would_not_apply_to_s3fs(monkeypatch: pytest.MonkeyPatch, extra: dict,
                                                               carried: bool) -> None:
    """An upload goes through obstore only when every option given is one it honours as s3fs
    does: encryption, checksums or fsspec's own request arguments keep it on s3fs (which puts
    them on every request), as does ``LSO_IO_CARRIER=fsspec``."""
    from lance_spark_ops.io import obstore_writes

    opts = {"aws_endpoint": "http://127.0.0.1:9", "allow_http": "true", "aws_access_key_id": "a",
            "aws_secret_access_key": "s", "aws_region": "us-east-1", **extra}
    assert (obstore_writes.s3_write_store("bucket", opts) is not None) is carried
    monkeypatch.setenv("LSO_IO_CARRIER", "fsspec")
    assert obstore_writes.s3_write_store("bucket", opts) is None
