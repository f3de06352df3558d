"""The benches' S3 server (``tests/support/moto_store``): moto's own answers, with the backend
lookup done once per signed service instead of under a lock on every request."""

from __future__ import annotations

import io
import threading

import boto3
import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import EnvironBuilder

from tests.support.latency_store import MotoServer
from tests.support.moto_store import CachedDispatch, signed_scope

KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing-secret", "region_name": "us-east-1"}


def _environ(path: str, service: str | None, region: str = "us-east-1") -> dict:
    headers = {}
    if service:
        headers["Authorization"] = ("AWS4-HMAC-SHA256 Credential=testing/20261129/"
                                    f"{region}/{service}/aws4_request, SignedHeaders=host, Signature=00")
    return EnvironBuilder(path=path, headers=headers).get_environ()


def test_signed_scope() -> None:
    assert signed_scope(_environ("/bucket/key", "s3")) == ("us-east-1", "s3")
    assert signed_scope(_environ("/bucket/key", "s3", "eu-west-1")) == ("eu-west-1", "s3")
    assert signed_scope(_environ("/", "dynamodb")) is None  # picked by a header in moto: never cached
    assert signed_scope(_environ("/bucket/key", None)) is None  # unsigned: moto's path
    assert signed_scope(_environ("/", "bedrock")) is None  # picked by path in moto: never cached
    assert signed_scope(_environ("/moto-api/reset", "s3")) is None


def test_cached_dispatch_answers_as_moto_and_looks_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    moto_app = DomainDispatcherApplication(create_backend_app)
    ours = CachedDispatch()
    lookups = []
    real = DomainDispatcherApplication.get_application

    def counted(self, environ):
        lookups.append(environ["PATH_INFO"])
        return real(self, environ)

    monkeypatch.setattr(DomainDispatcherApplication, "get_application", counted)
    for path in ("/b/k1", "/b/k2", "/other/x"):
        assert ours.get_application(_environ(path, "s3")).service == "s3"
    assert lookups == ["/b/k1"]  # the first S3 request resolves, the rest reuse its app
    assert ours.get_application(_environ("/b/k", None)).service == "s3"  # unsigned: moto's default
    assert moto_app.get_application(_environ("/b/k1", "s3")) is not None
    assert lookups == ["/b/k1", "/b/k", "/b/k1"]


def test_server_serves_s3_and_dynamodb_concurrently() -> None:
    with MotoServer() as moto:
        s3 = boto3.client("s3", endpoint_url=moto.endpoint, **KEYS)
        s3.create_bucket(Bucket="bench-store")
        bodies = {f"k{i}": bytes([i]) * (1000 + i) for i in range(16)}
        errors: list[BaseException] = []
        start = threading.Barrier(len(bodies))

        def put_get(key: str) -> None:
            try:
                start.wait(30)
                s3.upload_fileobj(io.BytesIO(bodies[key]), "bench-store", key)
                got = s3.get_object(Bucket="bench-store", Key=key, Range="bytes=10-19")["Body"].read()
                assert got == bodies[key][10:20]
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=put_get, args=(k,)) for k in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        listed = s3.list_objects_v2(Bucket="bench-store")["Contents"]
        assert {o["Key"]: o["Size"] for o in listed} == {k: len(v) for k, v in bodies.items()}
        ddb = boto3.client("dynamodb", endpoint_url=moto.endpoint, **KEYS)
        ddb.create_table(TableName="t", KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                         BillingMode="PAY_PER_REQUEST")
        ddb.put_item(TableName="t", Item={"k": {"S": "a"}})
        assert ddb.get_item(TableName="t", Key={"k": {"S": "a"}})["Item"] == {"k": {"S": "a"}}


def _multipart(parts: list[bytes], metadata: dict[str, str] | None = None):
    from moto.s3.models import CaseInsensitiveDict, FakeMultipart

    mp = FakeMultipart("k", CaseInsensitiveDict(metadata or {}), "123456789012", "us-east-1")
    etags = [mp.set_part(i + 1, p).etag for i, p in enumerate(parts)]
    return mp, etags


@pytest.mark.parametrize("metadata", [
    {},  # moto's default: CRC64NVME (CRC32 without awscrt) over the whole object
    {"x-amz-checksum-algorithm": "CRC32"},  # composite of the parts' checksums
    {"x-amz-checksum-algorithm": "SHA256"},
    {"x-amz-checksum-algorithm": "CRC32", "x-amz-checksum-type": "FULL_OBJECT"},
])
def test_lean_complete_answers_as_moto(monkeypatch: pytest.MonkeyPatch, metadata: dict[str, str]) -> None:
    from moto.s3 import models as s3_models

    from tests.support.moto_store import lean_complete

    monkeypatch.setattr(s3_models, "S3_UPLOAD_PART_MIN_SIZE", 1000)
    parts = [bytes([i]) * 1000 + b"x" * i for i in range(1, 5)] + [b"tail"]
    mp, etags = _multipart(parts, metadata)
    listed = list(enumerate(etags, 1))
    value, etag, checksum = lean_complete(mp, iter(listed))
    assert bytes(value) == b"".join(parts)
    assert (bytes(value), etag, checksum) == s3_models.FakeMultipart.complete(mp, iter(listed))
    # an independent ETag: the MD5 of the parts' MD5s, then "-<parts>"
    import hashlib

    md5s = b"".join(hashlib.md5(p).digest() for p in parts)
    assert etag == f"{hashlib.md5(md5s).hexdigest()}-{len(parts)}"


def test_lean_complete_refuses_as_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.s3 import models as s3_models
    from moto.s3.exceptions import EntityTooSmall, InvalidPart, MalformedXML

    from tests.support.moto_store import lean_complete

    monkeypatch.setattr(s3_models, "S3_UPLOAD_PART_MIN_SIZE", 1000)
    mp, etags = _multipart([b"a" * 1000, b"b" * 10, b"c" * 1000])
    with pytest.raises(InvalidPart):  # an ETag that is not the part's
        lean_complete(mp, iter([(1, etags[1])]))
    with pytest.raises(InvalidPart):  # a part never uploaded
        lean_complete(mp, iter([(4, etags[0])]))
    with pytest.raises(EntityTooSmall):  # a part below the minimum before the last
        lean_complete(mp, iter(enumerate(etags, 1)))
    with pytest.raises(MalformedXML):
        lean_complete(mp, iter([]))


def test_server_completes_multipart_uploads() -> None:
    """Through the server (``lean_complete`` in place): the object, its ETag and checksum."""
    import base64
    import hashlib
    import zlib

    with MotoServer() as moto:
        s3 = boto3.client("s3", endpoint_url=moto.endpoint, **KEYS)
        s3.create_bucket(Bucket="bench-mpu")
        parts = [bytes([7]) * (5 << 20), bytes([9]) * (5 << 20), b"end"]
        up = s3.create_multipart_upload(Bucket="bench-mpu", Key="obj", ChecksumAlgorithm="CRC32")
        def crc32(data: bytes) -> str:
            return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()

        done = [{"PartNumber": i, "ChecksumCRC32": crc32(p),
                 "ETag": s3.upload_part(Bucket="bench-mpu", Key="obj", UploadId=up["UploadId"], PartNumber=i,
                                        Body=p, ChecksumAlgorithm="CRC32")["ETag"]}
                for i, p in enumerate(parts, 1)]
        s3.complete_multipart_upload(Bucket="bench-mpu", Key="obj", UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": done})
        got = s3.get_object(Bucket="bench-mpu", Key="obj", ChecksumMode="ENABLED")
        assert got["Body"].read() == b"".join(parts)
        md5s = b"".join(hashlib.md5(p).digest() for p in parts)
        assert got["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-3"'
        composite = b"".join(zlib.crc32(p).to_bytes(4, "big") for p in parts)
        assert got["ChecksumCRC32"] == crc32(composite) + "-3"
