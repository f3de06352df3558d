"""A task's prefetch GETs and direct ranged reads on S3 and Azure Blob storage through obstore
(the Python binding of the Rust object_store crate pylance itself uses), beside s3fs / adlfs
for everything else.

Why: a rewrite task decodes and encodes in Python while its prefetch runs, and every s3fs
request holds the GIL for ~2.5 ms in botocore (building, signing, parsing the answer) on the
one event-loop thread; under a busy decoder those requests queue for the GIL and the reads
stretch (``bench/io_carrier_bench.py``; 48 whole 1.3 MB objects at 20 ms beside a thread
spinning in Python: s3fs 1.5-2.1 s, obstore 0.6-1.0 s). obstore does the HTTP work on Rust
threads and takes the GIL only to hand the bytes over. adlfs (azure-storage-blob's asyncio
client) spends the GIL the same way.

Only reads: what ``Prefetcher`` asks (whole objects and ranges) and an ``ObjectStore``'s
direct ranged reads (footers, the pages of a column scan: ``get_ranges``), and only where the
options say everything a request needs. S3: static keys (or the ``AWS_*`` key variables, or
unsigned requests), an endpoint and region as given; vended credentials, profiles, requester
pays and instance roles stay on s3fs (botocore resolves them). Azure: an account name with its
key or a SAS token (or the ``AZURE_STORAGE_*`` variables of them, or unsigned requests), an
endpoint as given; service principals, managed identities, connection strings and any option
adlfs alone reads stay on adlfs. Everything stays on fsspec when ``LSO_IO_CARRIER=fsspec`` or
obstore is not installed. A failed prefetch or direct read is harmless: the read then goes
through s3fs / adlfs, which names what is wrong.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from lance_spark_ops.cache import region
from lance_spark_ops.io.budget import IOBudget
from lance_spark_ops.io.options import (
    CLIENT_SETTINGS,
    PROVIDER_KEY,
    duration_seconds,
    option_names,
    plain_options,
    with_environment,
)
from lance_spark_ops.io.retries import retry_limits

CARRIER_ENV = "LSO_IO_CARRIER"  # "fsspec": every request through fsspec

# our option names (pylance's, i.e. object_store's and their aliases) -> obstore's S3 keys
_KEYS = {
    "access_key_id": ("aws_access_key_id", "access_key_id"),
    "secret_access_key": ("aws_secret_access_key", "secret_access_key"),
    "session_token": ("aws_session_token", "aws_token", "session_token", "token"),
    "endpoint": ("aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url"),
    "region": ("aws_region", "region", "aws_default_region", "default_region"),
    "virtual_hosted_style_request": ("aws_virtual_hosted_style_request", "virtual_hosted_style_request"),
    "skip_signature": ("aws_skip_signature", "skip_signature"),
}
# every option name the obstore config is made from
OPTION_NAMES = frozenset(n for names in _KEYS.values() for n in names)
# options whose request semantics only botocore gives here: their presence keeps s3fs
_BOTOCORE_ONLY = ("aws_profile", "profile", "aws_request_payer", "request_payer", "aws_s3_express",
                  "s3_express", "aws_role_arn", "aws_s3_role_arn", "aws_web_identity_token_file",
                  "aws_container_credentials_relative_uri", "aws_metadata_endpoint", "metadata_endpoint")
_ENV = {"access_key_id": "AWS_ACCESS_KEY_ID", "secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN", "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
        "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")}


# obstore's Azure keys <- the option names that set them (pylance's aliases, ``io.options``,
# and adlfs's own keyword where it means the same)
_AZURE_KEYS = {
    "account_name": (*option_names("az", "account_name"), "account_name"),
    "account_key": (*option_names("az", "account_key"), "account_key"),
    "sas_key": (*option_names("az", "sas_token"), "sas_token"),
    "endpoint": option_names("az", "account_host"),
    "skip_signature": option_names("az", "anon"),
}
# every option obstore's Azure config honours as adlfs does: its keys, client settings, the
# container's name (the URI's anyway). Any other option (a service principal, a connection
# string, adlfs's own keywords ...) keeps the reads on adlfs
AZURE_OPTION_NAMES = frozenset({*(n for names in _AZURE_KEYS.values() for n in names), *CLIENT_SETTINGS,
                                "azure_container_name", "container_name"})
AZURE_PROTOCOLS = ("az", "abfs", "abfss")


def _truthy(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("1", "true", "yes", "on")


def _first(opts: Mapping[str, Any], names: Sequence[str]) -> Any:
    return next((opts[n] for n in names if opts.get(n) not in (None, "")), None)


def _env(names: str | tuple[str, ...]) -> str | None:
    return next((os.environ[n] for n in ((names,) if isinstance(names, str) else names)
                 if os.environ.get(n)), None)


def s3_config(storage_options: Mapping[str, Any]) -> dict[str, Any] | None:
    """obstore's S3 config for these options, or None when they leave something to botocore
    (see the module docstring)."""
    if PROVIDER_KEY in storage_options:
        return None
    opts = plain_options(dict(storage_options))
    if any(opts.get(k) not in (None, "", False) for k in _BOTOCORE_ONLY):
        return None
    cfg = {ours: _first(opts, names) for ours, names in _KEYS.items()}
    unsigned = _truthy(cfg["skip_signature"])
    if cfg["access_key_id"] is None and cfg["secret_access_key"] is None and not unsigned:
        for key in ("access_key_id", "secret_access_key", "session_token"):  # botocore's first source
            cfg[key] = _env(_ENV[key])
    if cfg["region"] is None:
        cfg["region"] = _env(_ENV["region"])
    if cfg["endpoint"] is None:
        cfg["endpoint"] = _env(_ENV["endpoint"])
    signed = cfg["access_key_id"] is not None and cfg["secret_access_key"] is not None
    if not signed and not unsigned:
        return None  # an instance role, a profile, SSO ...: botocore's credential chain
    if cfg["region"] is None:
        return None  # botocore would find one in the config file or the bucket's answer
    out = {k: v for k, v in cfg.items() if v is not None}
    for flag in ("virtual_hosted_style_request", "skip_signature"):
        if flag in out:
            out[flag] = _truthy(out[flag])
    return out


def azure_config(storage_options: Mapping[str, Any]) -> dict[str, Any] | None:
    """obstore's Azure config for these options (over the ``AZURE_STORAGE_*`` variables, as
    adlfs gets them: ``options.with_environment``), or None when they leave something to adlfs
    (see the module docstring)."""
    if PROVIDER_KEY in storage_options or os.environ.get("AZURE_STORAGE_CONNECTION_STRING"):
        return None  # vended credentials; a connection string adlfs prefers to any key
    opts = with_environment("az", storage_options)
    if any(str(k).lower() not in AZURE_OPTION_NAMES for k in opts):
        return None
    cfg = {ours: _first(opts, names) for ours, names in _AZURE_KEYS.items()}
    unsigned = _truthy(cfg["skip_signature"])
    if cfg["account_key"] is not None:
        cfg["sas_key"] = None  # adlfs signs with the key when both are given
    signed = cfg["account_key"] is not None or cfg["sas_key"] is not None
    if cfg["account_name"] is None or not (signed or unsigned):
        return None  # a managed identity, the Azure CLI ...: adlfs's credential chain
    out = {k: v for k, v in cfg.items() if v is not None}
    if "sas_key" in out:
        out["sas_key"] = str(out["sas_key"]).lstrip("?")
    if "skip_signature" in out:
        out["skip_signature"] = _truthy(out["skip_signature"])
    return out


def client_options(storage_options: Mapping[str, Any], endpoint: str | None) -> dict[str, Any]:
    """obstore's client options: http when the endpoint is http:// (as fsspec's translation
    allows it), and pylance's ``timeout`` / ``connect_timeout`` when given."""
    opts = plain_options(dict(storage_options))
    out: dict[str, Any] = {}
    allow = opts.get("allow_http") or opts.get("aws_allow_http") or opts.get("azure_allow_http")
    if (endpoint or "").startswith("http://") or _truthy(allow):
        out["allow_http"] = True
    for key in ("timeout", "connect_timeout"):
        if opts.get(key):
            out[key] = f"{duration_seconds(key, opts[key])}s"  # obstore takes no bare number
    return out


def retry_config(storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """pylance's ``client_max_retries`` / ``client_retry_timeout`` (seconds) when given; else
    3 retries within 30 s: a prefetch that keeps failing is left to the direct read, which
    retries on its own."""
    retries, timeout_s = retry_limits(storage_options, 3, 30.0)
    return {"max_retries": retries, "retry_timeout": timedelta(seconds=timeout_s)}


class ObstoreReader:
    """GETs of one bucket (an Azure container) through an obstore store (see the module
    docstring); ``S3Reader`` and ``AzureReader`` make the store."""

    def __init__(self, bucket: str, store: Any) -> None:
        self.bucket, self.store = bucket, store

    async def read_many(self, items: Sequence[tuple[str, int | None, int | None]], budget: IOBudget
                        ) -> list[memoryview]:
        """(path, start, end) spans of objects of this bucket (path ``bucket/key``; start None:
        the whole object), ``budget.max_requests`` at a time, as ``remote.read_many``."""
        import obstore

        from lance_spark_ops.io.remote import bounded

        prefix = f"{self.bucket}/"

        async def one(path: str, start: int | None, end: int | None) -> memoryview:
            # a view of obstore's buffer: a copy into ``bytes`` doubled each object's bytes
            # while it was made and left glibc more freed blocks to keep
            key = path[len(prefix):] if path.startswith(prefix) else path
            if start is None:
                got = await obstore.get_async(self.store, key)
                return memoryview(await got.bytes_async())
            return memoryview(await obstore.get_range_async(self.store, key, start=start, end=end))

        return await bounded([one(*it) for it in items], budget.max_requests)

    def get(self, path: str) -> memoryview | None:
        """A whole object of this bucket (path ``bucket/key``) in one GET; None on any failure
        but its absence (the caller then reads through fsspec, whose error names what is
        wrong). Raises ``FileNotFoundError`` when it is absent: asking again would not help."""
        import obstore
        from obstore.exceptions import NotFoundError

        prefix = f"{self.bucket}/"
        if not path.startswith(prefix):
            return None
        try:
            return memoryview(obstore.get(self.store, path[len(prefix):]).bytes())
        except NotFoundError:
            raise FileNotFoundError(path) from None
        except Exception:  # noqa: BLE001 - see the docstring
            return None

    def get_ranges(self, path: str, spans: Sequence[tuple[int, int]]) -> list[memoryview] | None:
        """The (start, end) spans of one object (path ``bucket/key``), concurrently and with the
        GIL released while they are in flight; None on any failure or short answer: the caller
        then reads through fsspec (s3fs, adlfs), whose error names what is wrong."""
        import obstore

        prefix = f"{self.bucket}/"
        if not path.startswith(prefix) or not spans:
            return None
        try:
            got = obstore.get_ranges(self.store, path[len(prefix):], starts=[s for s, _ in spans],
                                     ends=[e for _, e in spans], coalesce=0)
        except Exception:  # noqa: BLE001 - see the docstring
            return None
        views = [memoryview(g) for g in got]
        if len(views) != len(spans) or any(len(v) != e - s for v, (s, e) in zip(views, spans, strict=True)):
            return None
        return views


class S3Reader(ObstoreReader):
    """An ``ObstoreReader`` of an S3 bucket."""

    def __init__(self, bucket: str, config: dict[str, Any], client: dict[str, Any],
                 retry: dict[str, Any]) -> None:
        from obstore.store import S3Store

        super().__init__(bucket, S3Store(bucket, config=config, client_options=client, retry_config=retry))


class AzureReader(ObstoreReader):
    """An ``ObstoreReader`` of an Azure Blob storage container."""

    def __init__(self, container: str, config: dict[str, Any], client: dict[str, Any],
                 retry: dict[str, Any]) -> None:
        from obstore.store import AzureStore

        super().__init__(container, AzureStore(container, config=config, client_options=client,
                                               retry_config=retry))


# readers by bucket and options, kept for the process: their connections outlive a task (as s3fs's
# cached filesystems' do), so a worker's next task does not open (and TLS-handshake) them again
_READERS = region("io.obstore_readers", max_entries=16)


def cached_store(cache: Any, bucket: str, storage_options: Mapping[str, Any], retry: dict[str, Any],
              make: Callable[[str, dict[str, Any], dict[str, Any], dict[str, Any]], Any],
              config_of: Callable[[Mapping[str, Any]], dict[str, Any] | None] = s3_config) -> Any | None:
    """``make(bucket, config, client options, retry)`` for these options, kept in ``cache`` by
    all four (and ``make``); None when obstore is not to carry them (the carrier is turned off,
    ``config_of`` finds the options need s3fs / adlfs, obstore is missing or refuses the config)."""
    if os.environ.get(CARRIER_ENV, "").strip().lower() == "fsspec":
        return None
    config = config_of(storage_options)
    if config is None:
        return None
    client = client_options(storage_options, config.get("endpoint"))
    # keyed by a digest: the key would otherwise hold the secret in clear in the cache's index
    key = hashlib.sha256(repr((make.__qualname__, bucket, sorted(config.items()), sorted(client.items()),
                               sorted(retry.items()))).encode()).hexdigest()
    made = cache.get(key)
    if made is None:
        try:
            made = make(bucket, config, client, retry)
        except Exception:  # noqa: BLE001 - obstore missing (ImportError) or a config it refuses
            return None
        cache.put(key, made, 1 << 16)
    return made


def s3_reader(bucket: str, storage_options: Mapping[str, Any]) -> S3Reader | None:
    """An obstore reader for ``bucket`` under these options, or None (s3fs reads: see
    ``cached_store``)."""
    return cached_store(_READERS, bucket, storage_options, retry_config(storage_options), S3Reader)


def azure_reader(container: str, storage_options: Mapping[str, Any]) -> AzureReader | None:
    """An obstore reader for an Azure ``container`` under these options, or None (adlfs reads)."""
    return cached_store(_READERS, container, storage_options, retry_config(storage_options), AzureReader,
                        azure_config)


def reader_for(protocol: str, bucket: str, storage_options: Mapping[str, Any]) -> ObstoreReader | None:
    """The obstore reader of a store of ``protocol`` (S3 or Azure), or None (fsspec reads)."""
    if protocol in ("s3", "s3a"):
        return s3_reader(bucket, storage_options)
    if protocol in AZURE_PROTOCOLS and "@" not in bucket:  # container@account.dfs...: adlfs's form
        return azure_reader(bucket, storage_options)
    return None
