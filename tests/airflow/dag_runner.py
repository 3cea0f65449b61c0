"""Run one DAG with ``dag.test()`` in this process and print its outcome as one JSON line.

The Airflow tests run every DAG in a fresh subprocess (this script), so Airflow's global
state (configuration, ORM session, plugins, the Spark JVM) never leaks between tests or
into the rest of the suite.

    python dag_runner.py DAG_FILE DAG_ID [--conf JSON] [--logical-date ISO] [--runs N] [--run-confs JSON]

After each run, a line on stdout: ``DAG_RESULT {"state", "run_id", "tasks": {key:
{"state", "try_number"}}, "xcom": {key: value}}``; key is ``task_id`` or
``task_id[map_index]``. ``--runs N`` runs the DAG N times one after the other in this
process (new DAG runs; one Spark JVM when TXN_BROKER_SPARK_KEEP_SESSION is set).
``--run-confs '[null, {...}]'``: one run per entry, each with its own conf (null: none).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any


def load_dag(path: Path, dag_id: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"dagfile_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from airflow.sdk import DAG

    for value in vars(module).values():
        if isinstance(value, DAG) and value.dag_id == dag_id:
            return value
    raise SystemExit(f"no DAG {dag_id!r} in {path}")


def outcome(dr: Any) -> dict[str, Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    tasks: dict[str, Any] = {}
    xcom: dict[str, Any] = {}
    with create_session() as session:
        for ti in dr.get_task_instances(session=session):
            key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
            tasks[key] = {"state": str(ti.state) if ti.state else None, "try_number": ti.try_number}
        rows = session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dr.dag_id,
                                                  key="return_value")).all()
        for row in rows:
            key = row.task_id if row.map_index < 0 else f"{row.task_id}[{row.map_index}]"
            value = row.value
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    pass
            xcom[key] = value
    return {"state": str(dr.state), "run_id": dr.run_id, "tasks": tasks, "xcom": xcom}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dag_file", type=Path)
    parser.add_argument("dag_id")
    parser.add_argument("--conf", default=None)
    parser.add_argument("--logical-date", default=None)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--run-confs", default=None)
    args = parser.parse_args(argv)
    dag = load_dag(args.dag_file, args.dag_id)
    kwargs: dict[str, Any] = {}
    if args.conf:
        kwargs["run_conf"] = json.loads(args.conf)
    if args.logical_date:
        import pendulum

        kwargs["logical_date"] = pendulum.parse(args.logical_date)
    confs = json.loads(args.run_confs) if args.run_confs else [kwargs.get("run_conf")] * args.runs
    for conf in confs:
        kwargs["run_conf"] = conf
        dr = dag.test(**kwargs)
        sys.stdout.flush()
        print("DAG_RESULT " + json.dumps(outcome(dr), default=str), flush=True)


if __name__ == "__main__":
    main()
