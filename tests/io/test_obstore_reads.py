"""Which S3 options the obstore prefetch carrier takes (``io.obstore_reads``), and which it
leaves to s3fs / botocore."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lance_spark_ops.io import obstore_reads
from lance_spark_ops.io.options import PROVIDER_KEY

STATIC = {"aws_access_key_id": "k", "aws_secret_access_key": "s", "aws_region": "eu-west-1",
          "aws_endpoint": "http://127.0.0.1:9", "allow_http": "true"}


@pytest.fixture(autouse=True)
def _no_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                 "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT",
                 obstore_reads.CARRIER_ENV):
        monkeypatch.delenv(name, raising=False)


def test_static_keys_and_aliases() -> None:
    assert obstore_reads.s3_config(STATIC) == {"access_key_id": "k", "secret_access_key": "s",
                                               "region": "eu-west-1", "endpoint": "http://127.0.0.1:9"}
    alias = {"access_key_id": "k", "secret_access_key": "s", "session_token": "t", "region": "us-east-1",
             "virtual_hosted_style_request": "true"}
    assert obstore_reads.s3_config(alias) == {"access_key_id": "k", "secret_access_key": "s",
                                              "session_token": "t", "region": "us-east-1",
                                              "virtual_hosted_style_request": True}
    assert obstore_reads.client_options(STATIC, "http://127.0.0.1:9") == {"allow_http": True}
    assert obstore_reads.client_options({**STATIC, "timeout": "5s"}, "https://s3") == {"allow_http": True,
                                                                                       "timeout": "5.0s"}
    # a bare number is seconds here; obstore itself refuses one ("failed to parse as Duration")
    assert obstore_reads.client_options({**STATIC, "connect_timeout": 3}, "https://s3") == {
        "allow_http": True, "connect_timeout": "3.0s"}


def test_environment_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ek")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "es")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert obstore_reads.s3_config({}) == {"access_key_id": "ek", "secret_access_key": "es",
                                           "region": "us-west-2"}


@pytest.mark.parametrize("opts", [
    {},  # an instance role or a profile: botocore's credential chain
    {"aws_access_key_id": "k", "aws_secret_access_key": "s"},  # no region: botocore finds one
    {**STATIC, "aws_profile": "dev"},
    {**STATIC, "aws_request_payer": "true"},
    {**STATIC, PROVIDER_KEY: object()},  # vended credentials, refreshed by the store
])
def test_left_to_botocore(opts: dict) -> None:
    assert obstore_reads.s3_config(opts) is None
    assert obstore_reads.s3_reader("bkt", opts) is None


def test_unsigned_and_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("obstore")
    opts = {"aws_skip_signature": "true", "aws_region": "us-east-1"}
    assert obstore_reads.s3_config(opts) == {"skip_signature": True, "region": "us-east-1"}
    reader = obstore_reads.s3_reader("bkt", STATIC)
    assert reader is not None
    # one per bucket and options in a process: a worker's next task reuses its connections
    assert obstore_reads.s3_reader("bkt", dict(STATIC)) is reader
    assert obstore_reads.s3_reader("bkt", {**STATIC, "aws_secret_access_key": "other"}) is not reader
    assert obstore_reads.s3_reader("bkt2", STATIC) is not reader
    monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    assert obstore_reads.s3_reader("bkt", STATIC) is None


def test_retries_follow_pylance_client_options() -> None:
    assert obstore_reads.retry_config({}) == {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}
    assert obstore_reads.retry_config({"client_max_retries": "7", "client_retry_timeout": "90"}) == {
        "max_retries": 7, "retry_timeout": timedelta(seconds=90)}
