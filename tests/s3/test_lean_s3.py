"""``tests.support.lean_s3``, the benches' low-CPU S3 store: its answers are moto's (the listing
pages, ranges, conditional writes, batch deletes a client sees), and a compaction through it
(Spark tasks, our s3fs / obstore carriers) is read by pylance through it as the rows it read."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.s3.conftest import S3
from tests.support.latency_store import s3_options
from tests.support.lean_s3 import LeanS3

KEYS = ["a", "d/0/x", "d/0/y", "d/1/x", "d/10/x", "d/2", "d/2/x", "d/3/", "e f/ü", "z"]


@pytest.fixture(scope="module")
def lean():
    with LeanS3(delay_ms=0) as store:
        yield store


def _client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing-secret", region_name="us-east-1")


def _pages(client, bucket: str, **kwargs) -> list[tuple[list[str], list[str], bool]]:
    """Every page of a ListObjectsV2 walk: its keys, common prefixes and truncation."""
    out, token = [], None
    while True:
        more = {"ContinuationToken": token} if token else {}
        page = client.list_objects_v2(Bucket=bucket, **kwargs, **more)
        out.append(([o["Key"] for o in page.get("Contents", [])],
                    [p["Prefix"] for p in page.get("CommonPrefixes", [])], page["IsTruncated"]))
        token = page.get("NextContinuationToken")
        if not page["IsTruncated"]:
            return out


@pytest.mark.parametrize("query", [
    {}, {"Prefix": "d/"}, {"Prefix": "d/", "Delimiter": "/"}, {"Delimiter": "/", "MaxKeys": 2},
    {"Prefix": "d/", "Delimiter": "/", "MaxKeys": 1}, {"Prefix": "d/", "MaxKeys": 3}, {"StartAfter": "d/1/x"},
    {"Prefix": "nothing/"}])
def test_listing_pages_are_motos(s3: S3, lean: LeanS3, query: dict) -> None:
    bucket = f"lst-{uuid.uuid4().hex[:8]}"
    ours, motos = _client(lean.direct), s3.client()
    for c in (ours, motos):
        c.create_bucket(Bucket=bucket)
        for k in KEYS:
            c.put_object(Bucket=bucket, Key=k, Body=k.encode())
    assert _pages(ours, bucket, **query) == _pages(motos, bucket, **query)


def test_objects_answer_as_motos(s3: S3, lean: LeanS3) -> None:
    bucket = f"obj-{uuid.uuid4().hex[:8]}"
    ours, motos = _client(lean.direct), s3.client()
    body = bytes(range(256)) * 40
    for c in (ours, motos):
        c.create_bucket(Bucket=bucket)
        c.put_object(Bucket=bucket, Key="k", Body=body)
    for rng in ("bytes=0-9", "bytes=10-", "bytes=-7", "bytes=10000-20000"):
        got = [c.get_object(Bucket=bucket, Key="k", Range=rng) for c in (ours, motos)]
        assert got[0]["Body"].read() == got[1]["Body"].read()
        assert got[0]["ContentRange"] == got[1]["ContentRange"]
    codes = []
    for c in (ours, motos):
        with pytest.raises(ClientError) as e:
            c.get_object(Bucket=bucket, Key="k", Range="bytes=99999-")
        codes.append(e.value.response["Error"]["Code"])
        with pytest.raises(ClientError) as e:
            c.put_object(Bucket=bucket, Key="k", Body=b"x", IfNoneMatch="*")
        codes.append(e.value.response["Error"]["Code"])
        with pytest.raises(ClientError) as e:
            c.get_object(Bucket=bucket, Key="gone")
        codes.append(e.value.response["Error"]["Code"])
        c.copy_object(Bucket=bucket, Key="k2", CopySource={"Bucket": bucket, "Key": "k"})
        c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k"}, {"Key": "never"}], "Quiet": True})
        codes.append(sorted(o["Key"] for o in c.list_objects_v2(Bucket=bucket)["Contents"]))
        codes.append(c.get_object(Bucket=bucket, Key="k2")["Body"].read() == body)
    assert codes[:5] == codes[5:] and codes[:5] == ["InvalidRange", "PreconditionFailed", "NoSuchKey", ["k2"],
                                                    True]


def test_compaction_through_it_reads_back_in_pylance(spark, lean: LeanS3) -> None:
    import lance

    _client(lean.direct).create_bucket(Bucket="cmp")
    uri, direct = "s3://cmp/ds.lance", s3_options(lean.direct)
    ids = np.arange(60_000, dtype=np.int64)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 4).astype(np.float32)), 4)
    names = pa.array([f"v{i % 13}" for i in ids.tolist()])
    table = pa.table({"id": ids, "x": ids * 0.5, "s": names, "v": vectors})
    lance.write_dataset(table, uri, storage_options=direct, max_rows_per_file=5_000,
                        data_storage_version="2.1")
    lance.dataset(uri, storage_options=direct).delete("id % 5 = 1")
    expected = lance.dataset(uri, storage_options=direct).to_table().sort_by("id")
    before = lean.stats()["total"]
    # on executors (two tasks), through the delayed port
    m = compact(spark, uri, target_rows_per_fragment=24_000, storage_options=s3_options(lean.endpoint),
                tuning=Tuning(driver_rewrite_bytes=0))
    assert m.tasks == 2 and m.fragments_added == 2
    stats = lean.stats()
    assert stats["total"] > before and not stats["unsupported"], stats
    after = lance.dataset(uri, storage_options=direct)
    assert len(after.get_fragments()) == 2 and after.to_table().sort_by("id").equals(expected)
    assert after.to_table(filter="id = 30002", columns=["x"])["x"].to_pylist() == [15001.0]
