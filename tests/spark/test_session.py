"""Sessions: get_spark takes the master, name and conf spark-submit / spark-defaults.conf / the
caller give, and every job runs on a session without ``sparkContext`` (Spark Connect's shape)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_spark_ops.spark.runtime.session import (
    DEFAULT_PARALLELISM,
    default_parallelism,
    is_classic,
    session_settings,
)
from tests.spark.datasets import rows_multiset, small_fragments

PY = "/opt/py/bin/python"


def test_settings_take_what_was_configured() -> None:
    env = {"PYSPARK_PYTHON": PY}
    master, conf = session_settings("app", None, {}, {}, env)
    assert master == "local[2]" and conf == {
        "spark.app.name": "app", "spark.ui.showConsoleProgress": "false",
        "spark.python.daemon.module": "lance_spark_ops.spark.runtime.daemon",
        "spark.python.unix.domain.socket.enabled": "true", "spark.pyspark.python": PY}
    submitted = {"spark.master": "local[1]", "spark.app.name": "theirs",
                 "spark.python.daemon.module": "pyspark.daemon",
                 "spark.python.unix.domain.socket.enabled": "false"}
    master, conf = session_settings("app", None, {}, submitted, {**env, "MASTER": "local[3]"})
    assert master == "local[1]"
    assert conf == {"spark.ui.showConsoleProgress": "false", "spark.pyspark.python": PY}
    assert session_settings("app", None, {}, {}, {"SPARK_MASTER": "local[4]"})[0] == "local[4]"
    master, conf = session_settings("app", "local[5]", {"spark.pyspark.python": "/x"}, submitted, env)
    assert master == "local[5]" and conf["spark.pyspark.python"] == "/x"


@pytest.mark.parametrize("master", ["spark://h:7077", "yarn", "k8s://https://h:443"])
def test_cluster_masters_do_not_get_the_drivers_interpreter(master: str) -> None:
    chosen, conf = session_settings("app", None, {}, {"spark.master": master}, {"PYSPARK_PYTHON": PY})
    assert chosen == master and "spark.pyspark.python" not in conf
    assert conf["spark.python.daemon.module"] == "lance_spark_ops.spark.runtime.daemon"
    # a Unix socket where executors use the machine's /tmp; a YARN container's tmp path is too
    # long for a socket's (and k8s images vary): left to the cluster's configuration
    unix = conf.get("spark.python.unix.domain.socket.enabled")
    assert unix == ("true" if master.startswith("spark://") else None)


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


@pytest.mark.parametrize(("values", "expected"), [
    ({"spark.default.parallelism": "7", "spark.master": "local[2]"}, 7),
    ({"spark.master": "local[3]"}, 3),
    ({"spark.master": "local[2,2]"}, 2),
    ({"spark.master": "local"}, 1),
    ({"spark.master": "local[*]"}, os.cpu_count() or 1),
    ({"spark.master": "local-cluster[2, 3, 1024]"}, 6),
    ({"spark.master": "yarn", "spark.executor.instances": "4", "spark.executor.cores": "5"}, 20),
    ({"spark.master": "spark://h:7077"}, DEFAULT_PARALLELISM),
])
def test_parallelism_comes_from_the_conf(values: dict[str, str], expected: int) -> None:
    assert default_parallelism(types.SimpleNamespace(conf=_Conf(values))) == expected
    assert default_parallelism(None) == 1


@pytest.mark.spark
def test_spark_submit_master_and_name_win(tmp_path: Path) -> None:
    """A job started by ``spark-submit --master local[1] --name n`` runs on local[1] as n."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json\nfrom lance_spark_ops.spark.runtime.session import get_spark, default_parallelism\n"
        "s = get_spark('ours')\nc = s.sparkContext.getConf()\n"
        "print(json.dumps([c.get('spark.master'), c.get('spark.app.name'), default_parallelism(s),"
        " c.get('spark.ui.showConsoleProgress')]))\ns.stop()\n")
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    args = ["--master", "local[1]", "--name", "n", "--conf", "spark.ui.enabled=false", str(probe)]
    out = subprocess.run([str(submit), *args], env=env, capture_output=True, text=True, timeout=300,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["local[1]", "n", 1, "false"]


class _ConnectLike:
    """A classic session seen through Spark Connect's surface: no sparkContext, no JVM."""

    def __init__(self, real: object) -> None:
        self._real = real

    def __getattr__(self, name: str) -> object:
        if name in ("sparkContext", "_sc", "_jsc", "_jvm", "_jsparkSession"):
            raise AssertionError(f"the library touched {name} on a Connect session")
        return getattr(self._real, name)


@pytest.fixture
def connect_like(spark, monkeypatch: pytest.MonkeyPatch) -> _ConnectLike:
    fake = types.ModuleType("pyspark.sql.connect.session")
    fake.SparkSession = _ConnectLike  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyspark.sql.connect.session", fake)
    session = _ConnectLike(spark)
    assert not is_classic(session) and is_classic(spark)
    return session


@pytest.mark.spark
def test_jobs_run_without_spark_context(connect_like: _ConnectLike, tmp_path: Path) -> None:
    import lance

    from lance_spark_ops.row_id_index import lookup
    from lance_spark_ops.spark import ColumnFunction, add_columns, compact, rebuild_row_id_index

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", stable=True, fragments=4)
    cols = ["id", "f"]
    before = rows_multiset(lance.dataset(uri).to_table(), cols)
    m = compact(connect_like, uri, target_rows_per_fragment=1000)
    assert m.commits == 1 and rows_multiset(lance.dataset(uri).to_table(), cols) == before
    fn = ColumnFunction(lambda b: {"g": pc.add(b.column("id"), 1)}, pa.schema([("g", pa.int64())]), ("id",))
    add_columns(connect_like, uri, fn)
    tbl = lance.dataset(uri).to_table()
    assert tbl.column("g").equals(pc.add(tbl.column("id"), 1))
    m = rebuild_row_id_index(connect_like, uri, rows_per_partition=500)
    after = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    assert m.index_rows == after.num_rows
    assert np.array_equal(lookup(uri, after.column("_rowid")), after.column("_rowaddr").to_numpy())
