"""Credential vending: a namespace (a small LanceNamespace in this file, plugged in by class path)
vends storage options for a table on the moto S3 server with an expiry shorter than the run;
``jobs/maintain.py`` asks again before each action, finishes, and the vended secret never
appears in its output, its log or its report."""

from __future__ import annotations

import json
import logging
import time

import pytest
from lance_namespace import DescribeTableResponse, LanceNamespace, ListTablesResponse

from tests.s3.conftest import S3

VENDED_SECRET = "vended-secret-f0e1d2c3b4a5"
CALLS: list[float] = []


class VendingNamespace(LanceNamespace):
    """One table, ``t``, at ``location``; vends ``options`` expiring ``ttl_ms`` after each call."""

    def __init__(self, **props: str) -> None:
        self.props = props

    def namespace_id(self) -> str:
        return "VendingNamespace"

    def list_tables(self, request):  # type: ignore[no-untyped-def]
        return ListTablesResponse(tables=["t"])

    def describe_table(self, request):  # type: ignore[no-untyped-def]
        CALLS.append(time.time())
        options = json.loads(self.props["options"])
        if len(CALLS) > 1:  # a careless catalog client logs what it vends: the job's log hides it
            secret = options["aws_secret_access_key"]
            logging.getLogger("lance_spark_ops.vending").warning("vending %s", secret)
        options["expires_at_millis"] = str(int(time.time() * 1000) + int(self.props["ttl_ms"]))
        return DescribeTableResponse(location=self.props["location"], storage_options=options)


@pytest.mark.spark
def test_vended_credentials_are_refreshed_and_never_shown(spark, s3: S3, tmp_path, capsys) -> None:
    import lance
    import pyarrow as pa

    uri = s3.uri("t.lance")
    data = pa.table({"id": pa.array(range(1200), pa.int64())})
    lance.write_dataset(data, uri, storage_options=s3.options, max_rows_per_file=100)
    for i in range(5):
        more = pa.table({"id": pa.array(range(1200 + 10 * i, 1210 + 10 * i), pa.int64())})
        lance.write_dataset(more, uri, mode="append", storage_options=s3.options)
    expected = lance.dataset(uri, storage_options=s3.options).to_table().sort_by("id")
    policy = tmp_path / "policy.toml"
    policy.write_text('target_rows_per_fragment = 1000\ncompact_min_small_fragments = 4\n'
                      'vacuum_retention = "0s"\nvacuum_min_old_versions = 5\n')
    vended = {**s3.options, "aws_secret_access_key": VENDED_SECRET}
    from jobs.maintain import main

    CALLS.clear()
    report = tmp_path / "report"
    code = main(["--namespace-impl", f"{__name__}.VendingNamespace",
                 "--namespace-prop", f"location={uri}", "--namespace-prop", f"options={json.dumps(vended)}",
                 "--namespace-prop", "ttl_ms=1500", "--policy", str(policy), "--report", str(report)], {})
    out, err = capsys.readouterr()
    line = json.loads(out.strip().splitlines()[-1])
    assert code == 0, out[-3000:] + err[-3000:]
    assert [(a["action"], a["status"]) for a in line["tables"][0]["actions"]] == [("compact", "ok"),
                                                                                  ("vacuum", "ok")]
    # resolved once, then asked again before each action and before measuring afterwards
    assert len(CALLS) >= 4
    assert lance.dataset(uri, storage_options=s3.options).to_table().sort_by("id").equals(expected)
    shown = out + err + (report / "report.json").read_text() + (report / "index.html").read_text()
    assert VENDED_SECRET not in shown
    assert "vending ***" in err  # the log line was written, the secret hidden
