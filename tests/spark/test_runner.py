from __future__ import annotations

import pytest

from lance_spark_ops.spark.runner import TaskContext, run_tasks, run_tasks_locally


def _square(task: dict, ctx: TaskContext) -> dict:
    return {"value": task["x"] ** 2, "prefix": ctx.file_prefix}


def test_local_runner() -> None:
    out = run_tasks_locally("job1", [{"x": 2}, {"x": 3}], _square)
    assert {k: v[1]["value"] for k, v in out.items()} == {0: 4, 1: 9}
    assert out[1][1]["prefix"] == "job1-t1-alocal"


@pytest.mark.spark
def test_spark_runner_one_result_per_task(spark) -> None:
    tasks = [{"x": i} for i in range(5)]
    out = run_tasks(spark, "jobX", tasks, _square, description="test: squares")
    assert sorted(out) == list(range(5))
    assert [out[i][1]["value"] for i in range(5)] == [i * i for i in range(5)]
    assert all(out[i][1]["prefix"].startswith(f"jobX-t{i}-a") for i in range(5))
