"""Run the lance_maintenance DAG with ``dag.test`` once per run conf given (JSON list in argv[2]),
in the Airflow virtual environment, against the metadata DB under $AIRFLOW_HOME (migrated
here). Prints ``{"runs": [{task_id: state}, ...]}`` as the last line of stdout."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    dag_file, confs = Path(sys.argv[1]), json.loads(sys.argv[2])
    t0 = time.perf_counter()
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], check=True, stdout=subprocess.DEVNULL)
    migrated = time.perf_counter() - t0
    spec = importlib.util.spec_from_file_location("lance_maintenance", dag_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    runs = []
    for conf in confs:
        run = module.dag.test(run_conf=conf)
        runs.append({ti.task_id: str(ti.state) for ti in run.get_task_instances()})
    print(json.dumps({"runs": runs, "seconds": {"db_migrate": round(migrated, 1),
                                                "total": round(time.perf_counter() - t0, 1)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
