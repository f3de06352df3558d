"""pylance-style storage options and environment variables translated for fsspec backends;
unknown keys refused by name; secrets never shown."""

from __future__ import annotations

import pytest

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.io.options import conditional_put_disabled, fsspec_options, redact
from lance_spark_ops.io.storage import ObjectStore

SECRET = "s3cr3t-VALUE-never-shown"


def test_pylance_s3_keys_become_s3fs_arguments() -> None:
    got = fsspec_options("s3", {
        "aws_access_key_id": "AK", "aws_secret_access_key": SECRET, "aws_session_token": "TOK",
        "aws_endpoint": "http://127.0.0.1:9000", "aws_region": "eu-west-1", "allow_http": "true",
        "aws_virtual_hosted_style_request": "false", "client_max_retries": "3"}, env={})
    assert got == {"key": "AK", "secret": SECRET, "token": "TOK",
                   "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
                   "config_kwargs": {"s3": {"addressing_style": "path"}}, "use_listings_cache": False}
    # object_store's aliases
    assert fsspec_options("s3", {"endpoint": "http://e", "region": "r", "access_key_id": "a",
                                 "secret_access_key": "s", "skip_signature": "true"}, env={}) == {
        "client_kwargs": {"endpoint_url": "http://e", "region_name": "r"}, "key": "a", "secret": "s",
        "anon": True, "use_listings_cache": False}


@pytest.mark.parametrize("protocol, expected", [
    ("s3", {"config_kwargs": {"read_timeout": 30.0, "connect_timeout": 1.5}}),  # botocore's Config
    ("gs", {"requests_timeout": 30.0}),  # gcsfs: each request's total time (no connect timeout)
    ("az", {"read_timeout": 30, "connection_timeout": 2}),  # adlfs: whole seconds
])
def test_timeouts_reach_each_backend(protocol: str, expected: dict) -> None:
    """pylance's ``timeout`` / ``connect_timeout`` (object_store durations) become each fsspec
    backend's own timeouts instead of being dropped."""
    got = fsspec_options(protocol, {"timeout": "30s", "connect_timeout": "1500ms"}, env={})
    assert {k: v for k, v in got.items() if k != "use_listings_cache"} == expected


@pytest.mark.parametrize("value, seconds", [("30s", 30.0), ("500ms", 0.5), ("1m 30s", 90.0),
                                            ("2 minutes", 120.0), ("1h", 3600.0), ("45", 45.0), (7, 7.0),
                                            (0.25, 0.25)])
def test_durations(value: object, seconds: float) -> None:
    from lance_spark_ops.io.options import duration_seconds

    assert duration_seconds("timeout", value) == seconds


@pytest.mark.parametrize("value", ["", "soon", "30 s later", "0s", "-5s", True])
def test_bad_durations_are_refused(value: object) -> None:
    from lance_spark_ops.io.options import duration_seconds

    with pytest.raises(InvalidInputError, match="'timeout'"):
        duration_seconds("timeout", value)


def test_fsspec_keys_pass_through_and_merge() -> None:
    got = fsspec_options("s3", {"key": "K", "secret": "S", "client_kwargs": {"verify": False},
                                "aws_region": "us-east-1", "use_listings_cache": True}, env={})
    assert got == {"key": "K", "secret": "S", "client_kwargs": {"verify": False, "region_name": "us-east-1"},
                   "use_listings_cache": True}


def test_environment_fills_what_options_leave_unset() -> None:
    env = {"AWS_ACCESS_KEY_ID": "envkey", "AWS_SECRET_ACCESS_KEY": "envsecret", "AWS_ENDPOINT_URL": "http://env",
           "AWS_DEFAULT_REGION": "default-r", "AWS_REGION": "r1", "HOME": "/root"}
    got = fsspec_options("s3", {"aws_access_key_id": "explicit"}, env=env)
    assert got["key"] == "explicit" and got["secret"] == "envsecret"
    assert got["client_kwargs"] == {"endpoint_url": "http://env", "region_name": "r1"}
    only_default = fsspec_options("s3", {}, env={"AWS_DEFAULT_REGION": "default-r"})
    assert only_default["client_kwargs"] == {"region_name": "default-r"}
    # the explicit endpoint beats the environment's, whatever alias either uses
    got = fsspec_options("s3", {"aws_endpoint": "http://explicit"}, env={"AWS_ENDPOINT": "http://env"})
    assert got["client_kwargs"]["endpoint_url"] == "http://explicit"
    got = fsspec_options("s3", {"endpoint_url": "http://native", "key": "k"},
                         env={"AWS_ENDPOINT_URL": "http://env", "AWS_ACCESS_KEY_ID": "envkey"})
    assert got == {"endpoint_url": "http://native", "key": "k", "use_listings_cache": False}
    got = fsspec_options("s3", {"client_kwargs": {"region_name": "explicit"}}, env={"AWS_REGION": "env"})
    assert got["client_kwargs"] == {"region_name": "explicit"}
    assert fsspec_options("s3", {}, env={"AWS_ENDPOINT_URL": "http://a", "AWS_ENDPOINT_URL_S3": "http://s3"})[
        "client_kwargs"]["endpoint_url"] == "http://s3"


def test_gcs_and_azure_keys() -> None:
    assert fsspec_options("gs", {"google_service_account": "/k.json", "allow_http": "true"}, env={}) == {
        "token": "/k.json", "use_listings_cache": False}
    assert fsspec_options("gs", {"service_account_key": '{"type": "service_account"}'}, env={})["token"] == {
        "type": "service_account"}
    # an https endpoint is adlfs's account_host; an http one (Azurite) a connection string, since
    # adlfs builds https URLs from account_host (TLS to a plain-http emulator fails)
    got = fsspec_options("az", {"azure_storage_account_name": "acct", "azure_storage_account_key": SECRET,
                                "azure_storage_endpoint": "https://acct.blob.example.net/"}, env={})
    assert got == {"account_name": "acct", "account_key": SECRET, "account_host": "acct.blob.example.net",
                   "use_listings_cache": False}
    got = fsspec_options("az", {"azure_storage_account_name": "acct", "azure_storage_account_key": SECRET,
                                "azure_storage_endpoint": "http://127.0.0.1:10000/acct/",
                                "allow_http": "true"}, env={})
    assert got == {"account_name": "acct", "connection_string": "BlobEndpoint=http://127.0.0.1:10000/acct;"
                   f"AccountName=acct;AccountKey={SECRET}", "use_listings_cache": False}
    got = fsspec_options("az", {"azure_storage_sas_token": "?sv=1&sig=x"},
                         env={"AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:10000/acct"})
    assert got["connection_string"] == "BlobEndpoint=http://127.0.0.1:10000/acct;SharedAccessSignature=sv=1&sig=x"
    with pytest.raises(InvalidInputError, match="service principal"):
        fsspec_options("az", {"azure_storage_endpoint": "http://h/a", "azure_client_id": "c"}, env={})
    assert "connection_string" in redact(got) and SECRET not in repr(redact(fsspec_options(
        "az", {"azure_storage_account_key": SECRET, "azure_storage_endpoint": "http://h/a"}, env={})))
    env = {"AZURE_STORAGE_ACCOUNT_NAME": "e", "AZURE_STORAGE_SAS_TOKEN": "t"}
    assert fsspec_options("az", {}, env=env) == {
        "account_name": "e", "sas_token": "t", "use_listings_cache": False}


def test_gcs_service_account_naming_an_emulator(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """object_store's gcs_base_url / disable_oauth (how pylance reaches an emulator) become gcsfs's
    endpoint and anonymous token; there gcsfs's JSON-API class is used (see filesystem_class)."""
    import json

    key = tmp_path / "sa.json"
    key.write_text(json.dumps({"gcs_base_url": "http://127.0.0.1:4443/", "disable_oauth": True,
                               "client_email": "a@b", "private_key": "x"}))
    got = fsspec_options("gs", {"google_service_account": str(key), "allow_http": "true"}, env={})
    assert got == {"token": "anon", "endpoint_url": "http://127.0.0.1:4443", "use_listings_cache": False}
    inline = fsspec_options("gs", {"service_account_key": json.dumps({"gcs_base_url": "http://e"})}, env={})
    assert inline["endpoint_url"] == "http://e" and isinstance(inline["token"], dict)
    gcsfs = pytest.importorskip("gcsfs")
    from lance_spark_ops.io.options import filesystem_class

    assert filesystem_class("gs", got) is gcsfs.core.GCSFileSystem
    assert filesystem_class("gs", {"token": "anon"}) is None and filesystem_class("s3", got) is None


def test_unknown_keys_are_named_without_their_values() -> None:
    with pytest.raises(InvalidInputError, match="'aws_secret_acess_key'") as e:
        fsspec_options("s3", {"aws_secret_acess_key": SECRET}, env={})  # typo
    assert SECRET not in str(e.value)
    with pytest.raises(InvalidInputError, match="'bogus'"):
        ObjectStore("memory://x", {"bogus": 1})
    with pytest.raises(InvalidInputError, match="true or false"):
        fsspec_options("s3", {"aws_virtual_hosted_style_request": "maybe"}, env={})
    # another backend's pylance keys are ignored on local paths (one options dict for all URIs)
    assert fsspec_options("file", {"aws_region": "r", "allow_http": "true", "auto_mkdir": True}, env={}) == {
        "auto_mkdir": True}


def test_secrets_never_shown(tmp_path) -> None:  # type: ignore[no-untyped-def]
    so = {"aws_secret_access_key": SECRET, "aws_session_token": SECRET, "aws_region": "r",
          "client_kwargs": {"aws_secret_access_key": SECRET}}
    assert SECRET not in repr(redact(so)) and "'aws_region': 'r'" in repr(redact(so))
    store = ObjectStore(str(tmp_path), {"aws_secret_access_key": SECRET})
    assert SECRET not in repr(store) and SECRET not in str(store)


def test_conditional_put_switch_and_missing_backend() -> None:
    assert conditional_put_disabled({"aws_conditional_put": "disabled"})
    assert not conditional_put_disabled({"conditional_put": "etag"})
    assert ObjectStore("memory://cp").conditional_put
    with pytest.raises(UnsupportedError, match="unknown storage protocol"):
        ObjectStore("nosuchproto://bucket/x")


def test_remote_failures_are_typed_without_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("s3fs")
    from lance_spark_ops.errors import AccessDeniedError, LanceError, NotFoundError

    store = ObjectStore("s3://bucket/ds", {"aws_access_key_id": "AK", "aws_secret_access_key": SECRET,
                                           "aws_endpoint": "http://127.0.0.1:9", "aws_region": "r"})

    def denied(*args: object, **kwargs: object) -> bytes:
        raise PermissionError("Access Denied")

    def missing(*args: object, **kwargs: object) -> bytes:
        raise FileNotFoundError("bucket/ds/x")

    def unreachable(*args: object, **kwargs: object) -> bytes:
        raise ConnectionError("Connect timeout on endpoint URL")

    monkeypatch.setattr(store.fs, "cat_file", unreachable)
    with pytest.raises(LanceError, match="read failed: ConnectionError: Connect timeout") as e:
        store.read("x")
    assert type(e.value) is LanceError and e.value.path == "s3://bucket/ds/x" and SECRET not in str(e.value)
    monkeypatch.setattr(store.fs, "cat_file", denied)
    with pytest.raises(AccessDeniedError, match="read refused: PermissionError: Access Denied") as e:
        store.read("x")
    assert e.value.path == "s3://bucket/ds/x" and SECRET not in str(e.value)
    monkeypatch.setattr(store.fs, "cat_file", missing)
    with pytest.raises(NotFoundError):
        store.read_range("x", 0, 10)
