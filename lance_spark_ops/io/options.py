"""Storage options as pylance takes them, translated for the fsspec backend.

pylance (Rust ``object_store``) names options ``aws_access_key_id``, ``aws_endpoint``,
``allow_http`` ... and reads ``AWS_*`` / ``GOOGLE_*`` / ``AZURE_*`` environment variables;
fsspec's s3fs / gcsfs / adlfs want ``key``, ``secret``, ``client_kwargs`` ... This module maps
the first onto the second so one ``storage_options`` dict works for both libraries, e.g.::

    {"aws_endpoint": "http://127.0.0.1:9000", "aws_region": "us-east-1", "allow_http": "true",
     "aws_access_key_id": "K", "aws_secret_access_key": "S"}
    -> {"key": "K", "secret": "S", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000",
        "region_name": "us-east-1"}, "use_listings_cache": False}

Vended, expiring credentials: ``expires_at_millis`` (as lance-namespace / pylance name it) says
when the options stop working; ``PROVIDER_KEY`` may hold an object that gives fresh ones
(``storage_options()``; ``refresh_offset_s``: how long before the expiry to ask), which
``io.storage.ObjectStore`` uses to refresh itself during a long job. Neither reaches fsspec.

Explicit options win over environment variables. The backend's own keyword arguments pass
through unchanged. A key that is neither is an InvalidInputError naming the key (never its
value: values may be secrets, and ``redact`` hides them wherever options are shown).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from lance_spark_ops.errors import InvalidInputError

__all__ = ["EXPIRY_KEY", "PROVIDER_KEY", "SECRET_KEYS", "conditional_put_disabled", "expiry_of",
           "duration_seconds", "filesystem_class", "fsspec_options", "option_names", "plain_options",
           "redact", "refresh_at", "with_environment"]

EXPIRY_KEY = "expires_at_millis"  # vended credentials stop working then (epoch milliseconds)
PROVIDER_KEY = "storage_options_provider"  # an object giving fresh options (see the module docstring)

# object_store's client options and Lance's own: meaningful to pylance, no fsspec equivalent
# needed (retries: obstore's stores and adlfs's client take client_max_retries /
# client_retry_timeout themselves, ``io.retries``; s3fs and gcsfs keep their own; http is allowed
# by an http:// endpoint). The timeouts are here for backends without one; S3, GCS and Azure
# translate them (below).
_IGNORED_COMMON = frozenset({
    "allow_http", "aws_allow_http", "azure_allow_http", "google_allow_http", "allow_invalid_certificates",
    "connect_timeout", "timeout", "pool_idle_timeout", "pool_max_idle_per_host", "http1_only", "http2_only",
    "http2_keep_alive_interval", "http2_keep_alive_timeout", "http2_keep_alive_while_idle",
    "http2_max_frame_size", "user_agent", "default_content_type", "proxy_ca_certificate", "proxy_excludes",
    "randomize_addresses", "client_max_retries", "client_retry_timeout", "download_retry_count",
    "expires_at_millis", "use_opendal", "block_size", "proxy_url", "credentials_refresh_offset_seconds",
})

# the same, for callers outside this module (``io.obstore_writes``)
CLIENT_SETTINGS = _IGNORED_COMMON

# pylance key -> (fsspec path, converter); a path "a.b" sets nested dicts (client_kwargs.endpoint_url)
_Conv = Callable[[str, Any], Any]


def _same(_key: str, v: Any) -> Any:
    return v


def _truthy(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise InvalidInputError(f"storage option {key!r} must be true or false")


def _addressing(key: str, v: Any) -> str:
    return "virtual" if _truthy(key, v) else "path"


def _anon(key: str, v: Any) -> Any:
    return _truthy(key, v) or None  # None: drop (signing stays on)


def _json_dict(key: str, v: Any) -> Any:
    if isinstance(v, Mapping):
        return dict(v)
    try:
        return json.loads(v)
    except (TypeError, ValueError):
        raise InvalidInputError(f"storage option {key!r} must be a service account key in JSON") from None


# object_store's durations (humantime: "30s", "500ms", "1m 30s"); a bare number is seconds
_DURATION_UNITS = {
    "ns": 1e-9, "nsec": 1e-9, "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0,
    "secs": 1.0, "second": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0,
    "minutes": 60.0, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)")


def duration_seconds(key: str, v: Any) -> float:
    """A timeout option's value in seconds: object_store's duration text or a number of seconds."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        seconds = float(v)
    else:
        text = str(v).strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = list(_DURATION_PART.finditer(text))
            whole = bool(parts) and "".join(m.group(0) for m in parts).strip() == text
            if not whole or any(m.group(2) not in _DURATION_UNITS for m in parts):
                raise InvalidInputError(f"storage option {key!r} must be a duration such as 30s, 500ms or "
                                        f"1m 30s, not {v!r}") from None
            seconds = sum(float(m.group(1)) * _DURATION_UNITS[m.group(2)] for m in parts)
    if not seconds > 0:
        raise InvalidInputError(f"storage option {key!r} must be a positive duration, not {v!r}")
    return seconds


def _whole_seconds(key: str, v: Any) -> int:
    return max(1, round(duration_seconds(key, v)))


def _aliases(target: str, conv: _Conv, *names: str) -> dict[str, tuple[str, _Conv]]:
    return {n: (target, conv) for n in names}


_S3: dict[str, tuple[str, _Conv]] = {
    **_aliases("key", _same, "aws_access_key_id", "access_key_id"),
    **_aliases("secret", _same, "aws_secret_access_key", "secret_access_key"),
    **_aliases("token", _same, "aws_session_token", "aws_token", "session_token"),
    **_aliases("client_kwargs.endpoint_url", _same, "aws_endpoint", "aws_endpoint_url", "endpoint"),
    **_aliases("client_kwargs.region_name", _same, "aws_region", "region"),
    **_aliases("client_kwargs.region_name~", _same, "aws_default_region", "default_region"),
    **_aliases("config_kwargs.s3.addressing_style", _addressing, "aws_virtual_hosted_style_request",
               "virtual_hosted_style_request"),
    **_aliases("anon", _anon, "aws_skip_signature", "skip_signature"),
    **_aliases("requester_pays", _truthy, "aws_request_payer", "request_payer"),
    **_aliases("s3_additional_kwargs.ServerSideEncryption", _same, "aws_server_side_encryption"),
    **_aliases("s3_additional_kwargs.SSEKMSKeyId", _same, "aws_sse_kms_key_id"),
    **_aliases("s3_additional_kwargs.BucketKeyEnabled", _truthy, "aws_sse_bucket_key_enabled"),
    **_aliases("", _same, "aws_conditional_put", "conditional_put", "dynamodb_endpoint", "aws_s3_express",
               "s3_express", "aws_imdsv1_fallback", "imdsv1_fallback", "aws_metadata_endpoint",
               "metadata_endpoint", "aws_container_credentials_relative_uri", "aws_unsigned_payload",
               "unsigned_payload", "aws_checksum_algorithm", "checksum_algorithm", "aws_copy_if_not_exists",
               "copy_if_not_exists",
               "aws_disable_tagging", "disable_tagging", "aws_bucket", "aws_bucket_name",
               "bucket", "bucket_name"),
    # delta-rs' own S3 options (the same dict often serves import_delta's Delta side)
    **_aliases("", _same, "aws_s3_allow_unsafe_rename", "aws_s3_locking_provider", "delta_dynamo_table_name",
               "aws_s3_pool_idle_timeout", "aws_sts_pool_idle_timeout",
               "aws_s3_get_internal_server_error_retries",
               "aws_s3_role_arn", "aws_s3_role_session_name", "aws_web_identity_token_file", "aws_role_arn",
               "aws_role_session_name"),
    **_aliases("profile", _same, "aws_profile", "profile"),
    # object_store's per-request timeout: botocore's wait for the answer's bytes is the nearest
    **_aliases("config_kwargs.read_timeout", duration_seconds, "timeout"),
    **_aliases("config_kwargs.connect_timeout", duration_seconds, "connect_timeout"),
}
# endpoint_url (s3fs's own name) is accepted directly; "token" is both pylance's and s3fs's
_S3_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
           "AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION",
           "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "AWS_SKIP_SIGNATURE", "AWS_REQUEST_PAYER",
           "AWS_CONDITIONAL_PUT")

_GCS: dict[str, tuple[str, _Conv]] = {
    **_aliases("token", _same, "google_service_account", "service_account", "google_service_account_path",
               "service_account_path", "google_application_credentials", "application_credentials"),
    **_aliases("token", _json_dict, "google_service_account_key", "service_account_key"),
    **_aliases("token", lambda k, v: "anon" if _truthy(k, v) else None, "google_skip_signature",
               "skip_signature"),
    **_aliases("", _same, "google_bucket", "google_bucket_name", "bucket", "bucket_name"),
    **_aliases("requests_timeout", duration_seconds, "timeout"),  # gcsfs: each request's total time
}
_GCS_ENV = ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS")

_AZURE: dict[str, tuple[str, _Conv]] = {
    **_aliases("account_name", _same, "azure_storage_account_name", "azure_storage_account"),
    **_aliases("account_key", _same, "azure_storage_account_key", "azure_storage_access_key",
               "azure_storage_master_key", "access_key", "master_key"),
    **_aliases("sas_token", _same, "azure_storage_sas_key", "azure_storage_sas_token", "sas_key"),
    **_aliases("client_id", _same, "azure_storage_client_id", "azure_client_id"),
    **_aliases("client_secret", _same, "azure_storage_client_secret", "azure_client_secret"),
    **_aliases("tenant_id", _same, "azure_storage_tenant_id", "azure_storage_authority_id", "azure_tenant_id",
               "azure_authority_id", "authority_id"),
    # kept whole here: _azure_endpoint tells an http:// endpoint (an emulator) from an https:// one
    **_aliases("account_host", lambda k, v: str(v).rstrip("/"), "azure_storage_endpoint", "azure_endpoint",
               "endpoint"),
    **_aliases("connection_string", lambda k, v: "UseDevelopmentStorage=true" if _truthy(k, v) else None,
               "azure_storage_use_emulator", "use_emulator"),
    **_aliases("anon", _anon, "azure_skip_signature", "skip_signature"),
    **_aliases("", _same, "azure_container_name", "container_name", "azure_use_fabric_endpoint",
               "use_fabric_endpoint", "azure_msi_endpoint", "azure_identity_endpoint"),
    **_aliases("read_timeout", _whole_seconds, "timeout"),  # adlfs: whole seconds between reads
    **_aliases("connection_timeout", _whole_seconds, "connect_timeout"),
}
_AZURE_ENV = ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY",
              "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CLIENT_ID", "AZURE_STORAGE_CLIENT_SECRET",
              "AZURE_STORAGE_TENANT_ID", "AZURE_STORAGE_ENDPOINT", "AZURE_STORAGE_USE_EMULATOR")

_BACKENDS: dict[str, tuple[dict[str, tuple[str, _Conv]], tuple[str, ...]]] = {
    "s3": (_S3, _S3_ENV), "s3a": (_S3, _S3_ENV),
    "gs": (_GCS, _GCS_ENV), "gcs": (_GCS, _GCS_ENV),
    "az": (_AZURE, _AZURE_ENV), "abfs": (_AZURE, _AZURE_ENV), "abfss": (_AZURE, _AZURE_ENV),
    "adl": (_AZURE, _AZURE_ENV),
}
_ALL_PYLANCE_KEYS = frozenset(_S3) | frozenset(_GCS) | frozenset(_AZURE) | _IGNORED_COMMON

# keys whose values are never shown (pylance's names and the fsspec ones they become)
SECRET_KEYS = frozenset({
    "aws_secret_access_key", "secret_access_key", "aws_session_token", "aws_token", "session_token", "token",
    "secret", "password", "google_service_account_key", "service_account_key", "azure_storage_account_key",
    "azure_storage_access_key", "azure_storage_master_key", "access_key", "master_key", "account_key",
    "azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token", "azure_storage_client_secret",
    "azure_client_secret", "client_secret", "connection_string", "credential", "azure_storage_token",
    "bearer_token", "google_storage_token", "aws_sse_customer_key_base64", "aws_access_key_id",
    "access_key_id", "key",
})

# AbstractFileSystem's own keyword arguments (every backend takes them)
_FSSPEC_COMMON = frozenset({"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths",
                            "asynchronous", "loop", "batch_size"})


def expiry_of(options: Mapping[str, Any] | None) -> float | None:
    """When the options' vended credentials expire (epoch seconds), None when they do not."""
    value = (options or {}).get(EXPIRY_KEY)
    if value in (None, ""):
        return None
    try:
        return int(value) / 1000.0
    except (TypeError, ValueError):
        raise InvalidInputError(f"storage option {EXPIRY_KEY} must be epoch milliseconds") from None


def refresh_at(expires_at: float, offset: float, now: float) -> float:
    """When to ask again for credentials expiring at ``expires_at`` (epoch s), seen at ``now``:
    ``offset`` before the expiry, but not before half their remaining life (credentials that
    live shorter than the offset would otherwise be asked for at every request)."""
    return expires_at - min(offset, max(0.0, (expires_at - now) / 2))


def plain_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` without the credentials provider: what can be shown, serialised or compared."""
    return {k: v for k, v in (options or {}).items() if k != PROVIDER_KEY}


def redact(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` with every secret value replaced by ``'***'`` (for reprs and logs)."""
    out: dict[str, Any] = {}
    for k, v in (options or {}).items():
        if str(k).lower() in SECRET_KEYS:
            out[k] = "***"
        elif isinstance(v, Mapping):
            out[k] = redact(v)
        else:
            out[k] = v
    return out


@functools.lru_cache(maxsize=64)
def _fsspec_params(protocol: str) -> frozenset[str] | None:
    """Keyword arguments the backend's filesystem class declares (None: backend not installed)."""
    import fsspec

    try:
        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError):
        return None
    names: set[str] = set(_FSSPEC_COMMON)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names.update(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    names.discard("self")
    return frozenset(names)


def _set(out: dict[str, Any], target: str, value: Any, weak: bool) -> None:
    """Set ``out[a][b]...`` for target ``a.b...``; a weak value does not replace a set one."""
    *parents, leaf = target.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise InvalidInputError(f"storage option {p!r} must be a mapping")
    if weak and leaf in node:
        return
    node[leaf] = value


def _from_env(table: dict[str, tuple[str, _Conv]], names: tuple[str, ...],
              env: Mapping[str, str]) -> dict[str, Any]:
    found = {n.lower(): env[n] for n in names if env.get(n)}
    if "aws_endpoint_url_s3" in found:  # the S3-specific endpoint wins over the general one
        found["aws_endpoint_url"] = found.pop("aws_endpoint_url_s3")
    return {k: v for k, v in found.items() if k in table}


def _targets(key: str, value: Any, table: dict[str, tuple[str, _Conv]]) -> set[str]:
    """The fsspec settings a key sets (``client_kwargs.endpoint_url`` ...), to tell which
    environment variables an explicit option overrides whatever alias either uses."""
    if key in table:
        return {table[key][0].rstrip("~")} if table[key][0] else set()
    if isinstance(value, Mapping):
        return {f"{key}.{k}" for k in value}
    return {"client_kwargs.endpoint_url" if key == "endpoint_url" else key}


def option_names(protocol: str, target: str) -> tuple[str, ...]:
    """The pylance option names (aliases) that set the fsspec keyword ``target`` on ``protocol``."""
    table = _BACKENDS.get(protocol, ({}, ()))[0]
    return tuple(k for k, (t, _) in table.items() if t == target)


def with_environment(protocol: str, storage_options: Mapping[str, Any] | None,
                     env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``storage_options`` (without the provider) over the backend's environment variables
    (``AWS_ACCESS_KEY_ID`` ... as their pylance keys): an option overrides every variable
    that sets what it sets, whichever alias either uses."""
    given = plain_options(storage_options)
    table, env_names = _BACKENDS.get(protocol, ({}, ()))
    env = os.environ if env is None else env
    explicit = set().union(*(_targets(str(k).lower(), v, table) for k, v in given.items()))
    from_env = _from_env(table, env_names, env)
    merged = {k: v for k, v in from_env.items() if not _targets(k, v, table) & explicit}
    merged.update(given)
    return merged


def fsspec_options(protocol: str, storage_options: Mapping[str, Any] | None,
                   env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``fsspec.filesystem(protocol, ...)`` from pylance-style options.

    Environment variables (``AWS_ACCESS_KEY_ID`` ...) fill what the options leave unset.
    """
    merged = with_environment(protocol, storage_options, env)
    table = _BACKENDS.get(protocol, ({}, ()))[0]
    native = _fsspec_params(protocol)
    out: dict[str, Any] = {}
    for key, value in merged.items():
        lk = str(key).lower()
        if lk in table:
            target, conv = table[lk]
            if target:
                converted = conv(lk, value)
                if converted is not None:
                    weak = target.endswith("~")
                    _set(out, target.rstrip("~"), converted, weak)
        elif lk in _IGNORED_COMMON or (lk in _ALL_PYLANCE_KEYS and lk not in (native or ())):
            continue  # pylance's, meaningless here (or another backend's)
        elif (native is None or key in native) and isinstance(value, Mapping):
            _merge(out, key, value)
        elif native is None or key in native:
            out[key] = value
        else:
            raise InvalidInputError(f"unknown storage option {key!r} for {protocol}:// (neither a pylance / "
                                    f"object_store option nor a keyword of the fsspec backend)")
    if table is _GCS:
        _gcs_service_account(out)
    elif table is _AZURE:
        _azure_endpoint(out)
    if protocol in _BACKENDS:
        out.setdefault("use_listings_cache", False)  # listings must see other writers' commits
    return out


def filesystem_class(protocol: str, kwargs: Mapping[str, Any]) -> Any:
    """The fsspec class to build for ``kwargs`` when it is not the protocol's registered one, else None.

    gcsfs's registered class (``ExtendedGcsFileSystem``, from 2025) asks Google's storage-control
    gRPC service about each bucket before reads and writes; a non-Google endpoint (an emulator)
    cannot answer, and every lookup waits out a 30-60 s timeout. There: gcsfs's JSON-API class.
    """
    if protocol not in ("gs", "gcs"):
        return None
    endpoint = str(kwargs.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST", ""))
    if endpoint in ("", "default") or "googleapis.com" in endpoint:
        return None
    from gcsfs.core import GCSFileSystem

    return GCSFileSystem


def _gcs_service_account(out: dict[str, Any]) -> None:
    """A service account (file or key) with object_store's ``gcs_base_url`` / ``disable_oauth``
    (how pylance reaches a GCS emulator): gcsfs's ``endpoint_url`` and anonymous requests.
    gcsfs cannot load such an account (its private key is a placeholder), so it never sees it."""
    token = out.get("token")
    info: Any = token
    if isinstance(token, str) and os.path.isfile(token):
        try:
            with open(token, encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError):
            return  # gcsfs reports what is wrong with the file
    if not isinstance(info, Mapping):
        return
    if info.get("gcs_base_url"):
        out.setdefault("endpoint_url", str(info["gcs_base_url"]).rstrip("/"))
    if info.get("disable_oauth") and _truthy("disable_oauth", info["disable_oauth"]):
        out["token"] = "anon"


def _azure_endpoint(out: dict[str, Any]) -> None:
    """An endpoint URL (object_store's ``azure_storage_endpoint``) for adlfs: https as its
    ``account_host``; http (Azurite and other emulators: adlfs builds only https URLs from
    ``account_host``) as a connection string naming the endpoint with the account's key or SAS."""
    url = out.get("account_host")
    if not isinstance(url, str) or "://" not in url:
        return
    scheme, host = url.split("://", 1)
    if scheme.lower() == "https":
        out["account_host"] = host
        return
    if scheme.lower() != "http":
        raise InvalidInputError(f"storage option azure_storage_endpoint must be an http:// or https:// URL, "
                                f"not {scheme}://")
    del out["account_host"]
    parts = [f"BlobEndpoint={url}"]
    if out.get("account_name"):
        parts.append(f"AccountName={out['account_name']}")
    if out.get("account_key"):
        parts.append(f"AccountKey={out.pop('account_key')}")
    elif out.get("sas_token"):
        parts.append(f"SharedAccessSignature={str(out.pop('sas_token')).lstrip('?')}")
    elif any(out.get(k) for k in ("client_id", "client_secret", "tenant_id", "credential")):
        raise InvalidInputError("an http:// azure_storage_endpoint works with an account key, a SAS token or "
                                "anonymous access here, not with a service principal or credential")
    out.setdefault("connection_string", ";".join(parts))


def _merge(out: dict[str, Any], key: str, value: Mapping[str, Any]) -> None:
    node = out.setdefault(key, {})
    if not isinstance(node, dict):
        raise InvalidInputError(f"storage option {key!r} must be a mapping")
    for k, v in value.items():
        if isinstance(v, Mapping) and isinstance(node.get(k), dict):
            node[k] = {**node[k], **v}
        else:
            node.setdefault(k, v)


def conditional_put_disabled(storage_options: Mapping[str, Any] | None) -> bool:
    """Whether the caller declared the store has no conditional put (object_store's
    ``aws_conditional_put=disabled``)."""
    opts = {str(k).lower(): v for k, v in (storage_options or {}).items()}
    value = opts.get("aws_conditional_put", opts.get("conditional_put",
                                                     os.environ.get("AWS_CONDITIONAL_PUT", "")))
    return str(value).strip().lower() == "disabled"
