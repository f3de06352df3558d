"""``validate``: pylance 14's ``LanceDataset.validate()``, distributed over executors.

The driver checks the manifest against itself (``table.validate.manifest_findings``: fragment
ids, file lists and versions, row ids, index coverage); tasks of up to ``FRAGMENTS_PER_TASK``
fragments check their files (every data, deletion and row-id file exists with its recorded
size, footers agree with the manifest's rows and versions, deletion counts and offsets), and
tasks check the index files. Nothing is written. Findings are ``(table, version, fragment,
file, check, detail)`` rows; ``consistent`` is False when there is any.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lance_spark_ops.namespace.target import with_table_target
from lance_spark_ops.spark.files.validation_tasks import (
    FragmentsTask,
    IndicesTask,
    check_fragments,
    check_indices,
)
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset

FRAGMENTS_PER_TASK = 2000
INDICES_PER_TASK = 64


@dataclass
class ValidateMetrics:
    """What ``validate`` checked and found (``findings``: dicts of ``Finding.row``)."""

    uri: str
    version: int = 0
    fragments: int = 0
    files_checked: int = 0
    indices: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
    consistent: bool = True
    refusing: int = 0  # findings that make rewrites refuse the table
    seconds: dict[str, float] = field(default_factory=dict)
    job_tag: str = ""


@with_table_target(read_only=True)
def validate(spark: Any, uri: str, *, version: int | None = None, table: str | None = None,
             storage_options: dict[str, Any] | None = None, tuning: Tuning | None = None) -> ValidateMetrics:
    """Check one version (default: the latest) of the dataset at ``uri``; ``table`` names it
    in the findings (default: the URI). ``spark=None`` runs the tasks in this process."""
    from lance_spark_ops.table.validate import REFUSING

    so = dict(storage_options or {})
    metrics = ValidateMetrics(uri)
    with Job(spark, "validate", uri, metrics, tuning) as job:
        with job.phase("manifest"):
            ds = Dataset.open(uri, version, storage_options=so)
            metrics.version, metrics.fragments = ds.version, len(ds.fragments)
            found = [f.row(table or uri, ds.version) for f in ds.findings()]
            section = ds.manifest_file.index_section
            n_idx = len(section.indices) if section is not None else 0
            metrics.indices = n_idx
        n = metrics.fragments
        tasks: list[Any] = [FragmentsTask(uri, so, ds.version, (a, min(a + FRAGMENTS_PER_TASK, n)))
                            for a in range(0, n, FRAGMENTS_PER_TASK)]
        index_tasks = [IndicesTask(uri, so, ds.version, tuple(range(a, min(a + INDICES_PER_TASK, n_idx))))
                       for a in range(0, n_idx, INDICES_PER_TASK)]
        with job.phase("files", tasks=len(tasks) + len(index_tasks)):
            results = job.run_tasks(tasks, check_fragments) if tasks else []
            results += job.run_tasks(index_tasks, check_indices) if index_tasks else []
        seen = {(r["fragment"], r["file"], r["check"]) for r in found}
        for r in results:
            metrics.files_checked += r["files"]
            for f in r["findings"]:
                key = (f["fragment"], f["file"], f["check"])
                if key not in seen:
                    seen.add(key)
                    found.append({"table": table or uri, "version": ds.version, "fragment": f["fragment"],
                                  "file": f["file"], "check": f["check"], "detail": f["detail"]})
        metrics.findings = found
        metrics.consistent = not found
        metrics.refusing = sum(r["check"] in REFUSING for r in found)
    return metrics
