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


AZ = {"azure_storage_account_name": "acct", "azure_storage_account_key": "a2V5",
      "azure_storage_endpoint": "http://127.0.0.1:9/acct", "allow_http": "true"}


@pytest.fixture
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY",
                 "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CLIENT_ID", "AZURE_STORAGE_CLIENT_SECRET",
                 "AZURE_STORAGE_TENANT_ID", "AZURE_STORAGE_ENDPOINT", "AZURE_STORAGE_USE_EMULATOR",
                 "AZURE_STORAGE_CONNECTION_STRING"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("_no_azure_env")
def test_azure_keys_sas_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert obstore_reads.azure_config(AZ) == {"account_name": "acct", "account_key": "a2V5",
                                              "endpoint": "http://127.0.0.1:9/acct"}
    assert obstore_reads.client_options(AZ, "http://127.0.0.1:9/acct") == {"allow_http": True}
    sas = {"account_name": "acct", "azure_storage_sas_token": "?sv=1&sig=x"}
    assert obstore_reads.azure_config(sas) == {"account_name": "acct", "sas_key": "sv=1&sig=x"}
    # a key and a SAS token: signed with the key, as adlfs does
    assert "sas_key" not in obstore_reads.azure_config({**AZ, "sas_token": "sv=1"})
    unsigned = {"azure_storage_account_name": "acct", "azure_skip_signature": "true"}
    assert obstore_reads.azure_config(unsigned) == {"account_name": "acct", "skip_signature": True}
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "envacct")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "ZW52")
    assert obstore_reads.azure_config({}) == {"account_name": "envacct", "account_key": "ZW52"}
    # an option overrides the variable that sets the same thing
    assert obstore_reads.azure_config({"azure_storage_account_key": "b3B0"})["account_key"] == "b3B0"


@pytest.mark.usefixtures("_no_azure_env")
@pytest.mark.parametrize("opts", [
    {},  # a managed identity or the Azure CLI: adlfs's credential chain
    {"azure_storage_account_name": "acct"},
    # a service principal
    {**AZ, "azure_client_id": "id", "azure_client_secret": "s", "azure_tenant_id": "t"},
    {**AZ, "connection_string": "DefaultEndpointsProtocol=https;AccountName=acct"},  # adlfs's own keyword
    {**AZ, "azure_storage_use_emulator": "true"},
    {**AZ, PROVIDER_KEY: object()},  # vended credentials, refreshed by the store
])
def test_azure_left_to_adlfs(opts: dict) -> None:
    assert obstore_reads.azure_config(opts) is None
    assert obstore_reads.reader_for("az", "ctr", opts) is None


@pytest.mark.usefixtures("_no_azure_env")
def test_azure_reader_per_container_and_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("obstore")
    reader = obstore_reads.reader_for("az", "ctr", AZ)
    assert isinstance(reader, obstore_reads.AzureReader)
    assert obstore_reads.reader_for("abfs", "ctr", dict(AZ)) is reader
    assert obstore_reads.reader_for("az", "ctr2", AZ) is not reader
    # adlfs's container@account form, GCS and local stores stay on fsspec
    assert obstore_reads.reader_for("abfss", "ctr@acct.dfs.core.windows.net", AZ) is None
    assert obstore_reads.reader_for("gs", "bkt", AZ) is None
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    assert obstore_reads.reader_for("az", "ctr3", AZ) is None
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    assert obstore_reads.reader_for("az", "ctr", AZ) is None
