"""The stores ``object_store_bench.py`` runs both sides on, each behind the latency proxy
(``tests/support/latency_store``, a child process): S3 (``moto_server``) and Azure Blob storage
(Azurite, ``tests/support/azurite``; pylance reaches it with its own ``azure_storage_*`` keys).
Each gives the options straight to the server (set-up and checks, untimed) and through the
proxy (the timed runs), fresh buckets / containers, and untimed uploads, copies and listings."""

from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support.azurite import AzuriteProcess, azure_options, azurite_exe, connection_string
from tests.support.latency_store import MotoServer, ProxyProcess, create_bucket, s3_options


def _files(path: Path, prefix: str) -> list[tuple[Path, str]]:
    return [(f, f"{prefix}/{f.relative_to(path).as_posix()}") for f in path.rglob("*") if f.is_file()]


def upload(client: Any, path: Path, bucket: str, prefix: str) -> int:
    """Every file under ``path`` to S3 ``bucket/prefix/`` through a boto3 ``client`` (16 at once)."""
    items = _files(path, prefix)
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda it: client.upload_file(str(it[0]), bucket, it[1]), items))
    return len(items)


def keys_under(client: Any, bucket: str, prefix: str) -> set[str]:
    """Every S3 key under ``prefix/``, relative to it."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    return {obj["Key"][len(prefix) + 1:] for page in pages for obj in page.get("Contents", [])}


def copy_prefix(client: Any, src_bucket: str, src: str, dst_bucket: str, dst: str) -> None:
    """Server-side copy of every S3 object under ``src/`` (16 at once)."""
    def one(rel: str) -> None:
        client.copy_object(Bucket=dst_bucket, Key=f"{dst}/{rel}", CopySource={"Bucket": src_bucket,
                                                                               "Key": f"{src}/{rel}"})

    with ThreadPoolExecutor(16) as ex:
        list(ex.map(one, sorted(keys_under(client, src_bucket, src))))


class S3Bench(contextlib.ExitStack):
    """moto behind the proxy."""

    scheme = "s3"

    def __enter__(self) -> S3Bench:
        super().__enter__()
        import boto3

        self.server = self.enter_context(MotoServer()).endpoint
        self.proxy = self.enter_context(ProxyProcess(self.server))
        self.client = boto3.client("s3", endpoint_url=self.server, aws_access_key_id="testing",
                                   aws_secret_access_key="testing-secret", region_name="us-east-1")
        self.direct, self.via = s3_options(self.server), s3_options(self.proxy.endpoint)
        return self

    def uri(self, bucket: str, prefix: str) -> str:
        return f"s3://{bucket}/{prefix}"

    def bucket(self, name: str | None = None) -> str:
        name = name or f"bench-{uuid.uuid4().hex[:12]}"
        create_bucket(self.server, name)
        return name

    def upload(self, path: Path, bucket: str, prefix: str) -> int:
        return upload(self.client, path, bucket, prefix)

    def keys(self, bucket: str, prefix: str) -> set[str]:
        return keys_under(self.client, bucket, prefix)

    def copy(self, src_bucket: str, src: str, dst_bucket: str, dst: str) -> None:
        copy_prefix(self.client, src_bucket, src, dst_bucket, dst)

    def drop(self, bucket: str) -> None:
        """Delete a round's bucket and everything in it: an in-memory server holding every
        round's copies grows slower with each (moto at 5.9 GB by the end of a long run)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for page in pages:
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        self.client.delete_bucket(Bucket=bucket)


class AzureBench(contextlib.ExitStack):
    """Azurite (blob service, in memory) behind the proxy; buckets are containers."""

    scheme = "az"

    def __enter__(self) -> AzureBench:
        super().__enter__()
        exe = azurite_exe()
        if exe is None:
            raise SystemExit("Azurite is not installed: bash .ci/azurite-setup")
        self.server = self.enter_context(AzuriteProcess(exe)).endpoint  # .../devstoreaccount1
        account = urlsplit(self.server)
        self.proxy = self.enter_context(ProxyProcess(f"{account.scheme}://{account.netloc}"))
        self.direct = azure_options(self.server)
        self.via = azure_options(f"{self.proxy.endpoint}{account.path}")
        from azure.storage.blob import BlobServiceClient

        self.client = BlobServiceClient.from_connection_string(connection_string(self.server))
        self._copies: dict[tuple[str, str], dict[str, bytes]] = {}  # a source's blobs, read once
        return self

    def uri(self, bucket: str, prefix: str) -> str:
        return f"az://{bucket}/{prefix}"

    def bucket(self, name: str | None = None) -> str:
        name = name or f"bench-{uuid.uuid4().hex[:12]}"
        self.client.create_container(name)
        return name

    def _put_all(self, bucket: str, items: list[tuple[str, Any]]) -> None:
        c = self.client.get_container_client(bucket)
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda it: c.upload_blob(it[0], it[1], overwrite=True), items))

    def upload(self, path: Path, bucket: str, prefix: str) -> int:
        items = _files(path, prefix)
        self._put_all(bucket, [(name, f.read_bytes()) for f, name in items])
        return len(items)

    def keys(self, bucket: str, prefix: str) -> set[str]:
        c = self.client.get_container_client(bucket)
        return {b.name[len(prefix) + 1:] for b in c.list_blobs(name_starts_with=f"{prefix}/")}

    def copy(self, src_bucket: str, src: str, dst_bucket: str, dst: str) -> None:
        """Every blob under ``src/`` written again under ``dst/`` (the source is read once)."""
        blobs = self._copies.get((src_bucket, src))
        if blobs is None:
            c = self.client.get_container_client(src_bucket)
            blobs = self._copies[(src_bucket, src)] = {
                rel: c.download_blob(f"{src}/{rel}").readall() for rel in sorted(self.keys(src_bucket, src))}
        self._put_all(dst_bucket, [(f"{dst}/{rel}", data) for rel, data in blobs.items()])

    def drop(self, bucket: str) -> None:
        """Delete a round's container (Azurite in memory held 10 GB and stalled at 100 % CPU
        by the end of a run that kept them)."""
        self.client.delete_container(bucket)


STORES = {"s3": S3Bench, "azure": AzureBench}
