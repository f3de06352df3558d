"""Fault runs over the latency proxy (issue #39): the jobs of ``runners.RUNNERS`` (and an
INVERTED build) on S3 - moto behind ``tests/support/latency_store``'s proxy - and on Azure
(Azurite behind it) under the proxy's faults: 503 SlowDown (Azure's ServerBusy is a 503 too),
held requests (then reset) and connection resets before or after the server acted (an
ambiguous failure: the write landed, the client saw an error).

A run in four adds a storm of faults the client's retries cannot all absorb, so jobs also fail.

One run: pylance makes the dataset locally (``model.make_dataset`` + the runner's ``prepare``),
it is uploaded to the bucket, the job runs through the proxy with 1-3 faults armed, the bucket
is downloaded back over the local copy and ``model.check`` + the runner's ``post_check`` judge
it as for the ``faulty://`` runs: every version reads whole (no file of a commit whose outcome
was unknown deleted), the live rows exactly as expected (0 lost), every reported version
present (no orphan reported as committed); a failed job left the latest version as it was
(unless its commit's outcome was unknown); then a clean rerun must succeed.
"""

from __future__ import annotations

import os
import random
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from lance_spark_ops.errors import CommitStateUnknown, InvalidInputError, LanceError, UnsupportedError
from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.faults import runners
from tests.faults import runners_index as ri
from tests.faults.model import STATS, check, make_dataset, stable_row_ids
from tests.faults.runners import RUNNERS, JobRunner
from tests.faults.scenarios import _outcome, _partial, _recover, _reported
from tests.support.pylance_indices import index_segments

# -- an INVERTED build (the faulty:// runs cover BTREE / BITMAP / vectors) -------------------------------
_FTS_BEFORE: dict[str, int] = {}


def _fts_local(uri: str, so: dict[str, Any], rng: random.Random, rows: Any = None,
               tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.indices.indexing import create_index

    return create_index(None, uri, "s", "INVERTED", name="s_fts", replace=True, storage_options=so,
                        tuning=tuning)


def _fts_prepare(root: str, rng: random.Random) -> None:
    import lance

    _FTS_BEFORE[root] = lance.dataset(root).version


def _fts_post_check(root: str, ok: bool, job_seed: float) -> list[str]:
    """Full-text answers equal a scan's; after a success, every row indexed."""
    import lance

    before = _FTS_BEFORE.pop(root)
    ds = lance.dataset(root)
    bad: list[str] = []
    if not any(i["name"] == "s_fts" for i in index_segments(ds)):
        return ["the INVERTED index is missing after a success"] if ok else []
    ids = ds.to_table(columns=["id"])["id"].to_numpy()
    rng = random.Random(job_seed)
    for probe in [int(ids[rng.randrange(len(ids))]) for _ in range(3)]:
        got = sorted(ds.to_table(columns=["id"], full_text_query=f"r{probe}")["id"].to_pylist())
        want = sorted(ds.to_table(columns=["id"], filter=f"s = 'r{probe}'")["id"].to_pylist())
        if got != want:
            bad.append(f"full text r{probe}: the index answers {got}, a scan {want}")
    if ok and ds.version == before + 1 and ds.stats.index_stats("s_fts")["num_unindexed_rows"]:
        bad.append("INVERTED index s_fts leaves rows unindexed after the job")
    return bad


FTS = JobRunner("create_fts_index", "create_index", "create_index.py",
                lambda uri, rng, rows=None: [uri, "--column", "s", "--type", "INVERTED", "--name", "s_fts"],
                _fts_local, ("plan", "build", "commit"), ("build",), prepare=_fts_prepare,
                post_check=_fts_post_check, writer_kinds=ri.INDEX_WRITER_KINDS)

# the jobs that run on S3 here (the data-source writer and Delta import are the faulty:// runs')
PROXY_RUNNERS: dict[str, JobRunner] = {
    **{k: v for k, v in RUNNERS.items() if k not in ("datasource", "import_delta")}, FTS.name: FTS}

# -- the faults -----------------------------------------------------------------------------------------
# (operations, path fragment) pairs the jobs issue; LIST and DeleteObjects requests name the
# bucket only (their prefix / keys are in the query / body); the commit's PUT twice as likely
TARGETS = ((["GET"], "/data/"), (["GET"], "/_versions/"), (["GET"], "/_deletions/"), (["GET"], "/_indices/"),
           (["GET"], ""), (["PUT"], "/data/"), (["PUT"], "/_versions/"), (["PUT"], "/_versions/"),
           (["PUT"], "/_indices/"), (["PUT"], "/_transactions/"), (["LIST"], ""), (["DELETE_OBJECTS"], ""),
           ([], ""))
# Azure: blocks and block lists are PUTs, its Blob Batch deletes a POST naming the account only
# (operations, path fragment[, body fragment]) of the requests a fault may hit
Targets = tuple[tuple[list[str], str], ...] | tuple[tuple[list[str], str, str], ...]
AZURE_TARGETS: Targets = tuple((["POST"], "") if ops == ["DELETE_OBJECTS"] else (ops, path)
                               for ops, path in TARGETS)
# GCS (gcsfs, JSON API): object names are URL-encoded in a read's path; an upload is a POST
# naming its object in its body's metadata (the third item: ``body_contains``); deletes go in
# batches (POST) or one by one (DELETE)
GCS_TARGETS: tuple[tuple[list[str], str, str], ...] = (
    (["GET"], "%2Fdata%2F", ""), (["GET"], "%2F_versions%2F", ""), (["GET"], "%2F_deletions%2F", ""),
    (["GET"], "%2F_indices%2F", ""), (["GET"], "", ""), (["POST"], "/upload/", "/data/"),
    (["POST"], "/upload/", "/_versions/"), (["POST"], "/upload/", "/_versions/"),
    (["POST"], "/upload/", "/_indices/"), (["POST"], "/upload/", "/_transactions/"), (["LIST"], "", ""),
    (["POST"], "/batch/", ""), (["DELETE"], "", ""), ([], "", ""))
KINDS = ("slowdown", "reset", "reset_after", "timeout")
HOLD_S = 1.0  # a held request is reset after this (the client sees a dropped connection)


def draw_faults(rng: random.Random, kinds: tuple[str, ...] = KINDS,
                targets: Targets = TARGETS) -> list[dict[str, Any]]:
    """1-3 faults for ``LatencyProxy.inject``."""
    out = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(kinds)
        ops, path, *body = rng.choice(targets)
        f: dict[str, Any] = {"kind": "reset" if kind == "reset_after" else kind, "count": rng.randint(1, 3),
                             "ops": ops, "path_contains": path}
        if body:
            f["body_contains"] = body[0]
        if kind == "reset_after" or (kind == "timeout" and rng.random() < 0.5):
            f["forward"] = True  # the server acted first: an ambiguous failure
        if kind == "timeout":
            f["hold_s"] = HOLD_S
        out.append(f)
    return out


STORM_OPTIONS = {"config_kwargs": {"retries": {"max_attempts": 1}}}  # botocore (legacy mode): one retry


# Azure: one retry for adlfs's client and obstore's stores alike (``io.retries``)
AZURE_STORM_OPTIONS = {"client_max_retries": "1"}
GCS_STORM_OPTIONS: dict[str, Any] = {}  # gcsfs's own retries (6), which no option of pylance's sets


def draw_storm(rng: random.Random, targets: Targets = TARGETS) -> dict[str, Any] | None:
    """A run in four also gets a storm: 6-12 faults in a row on one kind of request, with the
    client's retries cut (S3: to s3fs's own five; Azure: to one), so that some requests
    exhaust them and the job fails (it must then leave the dataset as it was)."""
    if rng.random() >= 0.25:
        return None
    kind = rng.choice(("slowdown", "reset", "reset_after"))
    ops, path, *body = rng.choice(targets)
    return {"kind": "reset" if kind == "reset_after" else kind, "count": rng.randint(6, 12), "ops": ops,
            "path_contains": path, **({"body_contains": body[0]} if body else {}),
            **({"forward": True} if kind == "reset_after" else {})}


# -- moving the dataset -----------------------------------------------------------------------------------
def upload(client: Any, bucket: str, root: Path, prefix: str) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            client.put_object(Bucket=bucket, Key=f"{prefix}/{path.relative_to(root).as_posix()}",
                              Body=path.read_bytes())


def download(client: Any, bucket: str, prefix: str, root: Path) -> dict[str, float]:
    """Replace ``root`` by the objects under ``prefix/``; returns their times on the store
    (relative path -> epoch seconds)."""
    shutil.rmtree(root)
    times = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix) + 1:]
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
            times[rel] = obj["LastModified"].timestamp()
    return times


class S3Target:
    """A ``tests.s3.conftest.SlowS3`` bucket as a fault run's store: moved with boto3, direct."""

    name, targets, storm_options = "proxy", TARGETS, STORM_OPTIONS

    def __init__(self, slow: Any) -> None:
        self.slow, self.proxy = slow, slow.proxy

    @property
    def options(self) -> dict[str, Any]:
        return self.slow.options

    def uri(self, prefix: str) -> str:
        return self.slow.uri(prefix)

    def upload(self, root: Path, prefix: str) -> None:
        upload(self.slow.direct.client(), self.slow.direct.bucket, root, prefix)

    def download(self, prefix: str, root: Path) -> dict[str, float]:
        return download(self.slow.direct.client(), self.slow.direct.bucket, prefix, root)


class _EmulatorTarget:
    """An emulator's bucket / container behind the proxy as a fault run's store: ``direct``
    and ``proxied`` (``tests.gcs_azure.conftest``'s ``Azure`` / ``GCS``) name it without and
    through the proxy; moved with its fsspec filesystem, direct."""

    name: str
    targets: Targets
    storm_options: dict[str, Any]

    def __init__(self, direct: Any, proxied: Any, proxy: Any) -> None:
        self.direct, self.proxied, self.proxy = direct, proxied, proxy

    @property
    def options(self) -> dict[str, Any]:
        return self.proxied.options

    def uri(self, prefix: str) -> str:
        return self.proxied.uri(prefix)

    def _base(self, prefix: str) -> str:
        raise NotImplementedError

    def _put(self, fs: Any, objects: dict[str, bytes]) -> None:
        fs.pipe(objects)

    @staticmethod
    def _modified(info: dict[str, Any]) -> float:
        raise NotImplementedError

    def upload(self, root: Path, prefix: str) -> None:
        base = self._base(prefix)
        self._put(self.direct.fs(), {base + path.relative_to(root).as_posix(): path.read_bytes()
                                     for path in root.rglob("*") if path.is_file()})

    def download(self, prefix: str, root: Path) -> dict[str, float]:
        shutil.rmtree(root)
        fs = self.direct.fs()
        base = self._base(prefix)
        times = {}
        for path, info in fs.find(base, detail=True).items():
            rel = path[len(base):]
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(fs.cat_file(path))
            times[rel] = self._modified(info)
        return times


class AzureTarget(_EmulatorTarget):
    """An Azurite container behind the proxy (adlfs)."""

    name, targets, storm_options = "proxy-azure", AZURE_TARGETS, AZURE_STORM_OPTIONS

    def _base(self, prefix: str) -> str:
        return f"{self.direct.container}/{prefix}/"

    @staticmethod
    def _modified(info: dict[str, Any]) -> float:
        return info["last_modified"].timestamp()


class GCSTarget(_EmulatorTarget):
    """A gcp-storage-emulator bucket behind the proxy (gcsfs)."""

    name, targets, storm_options = "proxy-gcs", GCS_TARGETS, GCS_STORM_OPTIONS

    def _base(self, prefix: str) -> str:
        return f"{self.direct.bucket}/{prefix}/"

    def _put(self, fs: Any, objects: dict[str, bytes]) -> None:
        for path, data in objects.items():  # one at a time: the emulator serves one request at a time
            fs.pipe_file(path, data)

    @staticmethod
    def _modified(info: dict[str, Any]) -> float:
        return datetime.fromisoformat(str(info["updated"]).replace("Z", "+00:00")).timestamp()


def _vacuum_post_check(root: str, ok: bool, job_seed: float, times: dict[str, float]) -> list[str]:
    """``runners._vacuum_post_check`` for an uploaded dataset: a data file only old versions
    referenced must be gone unless it is newer than the earliest retained manifest (pylance's
    listing cutoff, ``table.cleanup.listing_cutoff``: an upload makes every file newer than the
    manifests pylance wrote before it, in the same second or later)."""
    import lance

    before, latest = runners._VACUUM_BEFORE.pop(root)
    if not ok:
        return []
    keep = runners._retain(random.Random(job_seed))
    versions = lance.dataset(root).versions()
    old = [v["version"] for v in versions if v["version"] <= latest - keep]
    bad = [f"versions {old} outlived retain_versions={keep} (latest was {latest})"] if old else []
    cutoff = min(v["timestamp"].timestamp() for v in versions)
    left = {f for f in (set(os.listdir(os.path.join(root, "data"))) & before) - runners._referenced(root)
            if times[f"data/{f}"] <= cutoff}
    return bad + ([f"vacuum left data files no version references: {sorted(left)[:5]} ({len(left)})"]
                  if left else [])


# -- one run ------------------------------------------------------------------------------------------------
def run_proxy_scenario(job: str, seed: int, tmp: Path, target: S3Target | AzureTarget | GCSTarget,
                       kinds: tuple[str, ...] = KINDS, faults: list[dict[str, Any]] | None = None,
                       fired_at_least: int = 0, options: dict[str, Any] | None = None,
                       must_commit: bool = False, must_fail: bool = False) -> list[str]:
    """One run on ``target``'s store under ``faults`` (default: drawn from the seed); returns
    the violations (empty: all held). ``fired_at_least``: the faults that
    must have fired when the job committed or failed. ``options``: storage options added to the
    job's (default: the storm's when one is drawn). ``must_commit``: the job must succeed and
    report a new version; ``must_fail``: it must fail (with a typed error naming a file). A
    failure that is no LanceError (a raw OSError, a botocore error) is a violation."""
    import lance

    runner = PROXY_RUNNERS[job]
    rng = random.Random(f"{target.name}/{job}/{seed}")
    drawn = draw_faults(rng, kinds, target.targets)
    storm = draw_storm(rng, target.targets)
    extra = options if options is not None else target.storm_options if storm and faults is None else {}
    faults = drawn + ([storm] if storm else []) if faults is None else faults
    label = f"{target.name} job={job} seed={seed} faults={faults}"
    root = tmp / "ds.lance"
    exp = make_dataset(str(root), rng.randrange(1 << 30), stable=runner.stable)
    if runner.prepare:
        runner.prepare(str(root), rng)
    ids_before = stable_row_ids(str(root)) if runner.stable else None
    latest_before = lance.dataset(str(root)).version
    job_seed = rng.random()
    prefix = f"ds-{job}-{seed}.lance"
    target.upload(root, prefix)
    STATS.runs[f"{target.name}/{job}"] += 1
    proxy = target.proxy
    proxy.reset()
    for f in faults:
        proxy.inject(**f)
    metrics, exc = None, None
    try:
        metrics = runner.local(target.uri(prefix), {**target.options, **extra}, random.Random(job_seed), None)
    except Exception as e:  # noqa: BLE001 - any outcome is allowed; the invariants are checked after
        exc = e
    fired = proxy.stats()["faults"]
    proxy.reset()
    if fired_at_least and sum(fired.values()) < fired_at_least and (exc is not None or _reported(metrics)):
        # (a job with nothing to do commits nothing: no commit to fault)
        raise AssertionError(f"{label}: {fired} faults fired, expected at least {fired_at_least}")
    for kind, n in fired.items():
        STATS.faults[f"proxy_{kind}"] += n
    STATS.outcomes[_outcome(exc)] += 1
    if isinstance(exc, InvalidInputError | UnsupportedError):  # not a fault: the harness is broken
        raise AssertionError(f"{label}: the job refused its input") from exc
    times = target.download(prefix, root)
    ok = exc is None and not _partial(metrics)
    early = []
    if must_commit and (not ok or not _reported(metrics)):
        early.append(f"{label}: the job must commit; it ended with {exc!r:.500} ({metrics})")
    if must_fail and (not isinstance(exc, LanceError) or not exc.path):
        early.append(f"{label}: the job must fail with a LanceError naming a file; it ended with "
                     f"{exc!r:.500}")
    if exc is not None and not isinstance(exc, LanceError):
        early.append(f"{label}: the job failed with an untyped error: {exc!r:.500}")
    if early:
        STATS.violations.extend(early)
        return early
    bad = check(label, str(root), exp, _reported(metrics), column=runner.column,
                column_must_exist=ok and bool(runner.column), row_ids=ids_before,
                readable_from=latest_before if runner.may_break_old_versions and not ok else 0)
    latest = lance.dataset(str(root)).version
    if exc is not None and not isinstance(exc, CommitStateUnknown) and job != "maintain" and \
            latest != latest_before:  # maintain: an earlier action may have committed
        bad.append(f"{label}: the job failed ({exc!r:.300}) but the latest version moved "
                   f"{latest_before} -> {latest}")
    if job == "vacuum":
        bad += [f"{label}: {b}" for b in _vacuum_post_check(str(root), ok, job_seed, times)]
    elif runner.post_check:
        bad += [f"{label}: {b}" for b in runner.post_check(str(root), ok, job_seed)]
    if bad:
        STATS.violations.extend(b for b in bad if b not in STATS.violations)
        return bad
    return _recover(runner, label, str(root), exp, random.Random(job_seed), ids_before)
