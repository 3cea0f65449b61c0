"""The Airflow part of ``make demo``: run the example pipelines under Airflow, on the
embedded defaults, and print what happened.

With nothing configured: the broker is the embedded one (SQLite + a local directory under
``$TXN_BROKER_HOME``, default ``./.txn_broker``), Spark runs ``local[2]`` in the task,
Airflow keeps its SQLite metadata database in ``$TXN_BROKER_HOME/airflow``, and the
warehouse load goes to SQLite unless ``TXN_BROKER_WAREHOUSE_URL`` names a PostgreSQL
database (the output says which). Each DAG runs end to end with ``dag.test()`` (the
scheduler's dependency loop, in this process); the full Airflow and Spark output goes to
``$TXN_BROKER_HOME/airflow/demo.log``. Every run is a new DAG run with new generated
input, so the demo can be run any number of times.

    python scripts/airflow_demo.py [DAG_ID ...]   # default: all four example DAGs
    python scripts/airflow_demo.py --ui           # airflow standalone on the same home

``orders_events`` is event-driven: under a scheduler its runs start when the triggerer's
``CommittedRecordsEventTrigger`` sees committed records. ``dag.test()`` has no triggerer,
so the demo polls that trigger once in this process (the same code) and hands the event to
the run as ``params.events``; then it replays the same event, which processes nothing.

``--ui`` starts every Airflow component (api-server with the UI on port 8080, scheduler,
dag-processor, triggerer) with the repository's DAGs and plugin and the demo's home, so
the demo's runs show up there; ``airflow standalone`` prints the admin password.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DAGS = ("orders_pipeline", "orders_events", "bank_transfers", "txn_broker_maintenance")


def configure() -> Path:
    """Point Airflow at the demo's home under the broker's, the repo's DAGs and plugins.
    Must run before Airflow is imported (it reads its configuration once). The Airflow
    settings are forced, not defaulted: the demo must never run in another Airflow's home."""
    broker_home = Path(os.environ.get("TXN_BROKER_HOME") or REPO / ".txn_broker").absolute()
    home = broker_home / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    os.environ["TXN_BROKER_HOME"] = str(broker_home)
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    })
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("TXN_BROKER_SPARK_KEEP_SESSION", "1")  # one JVM for every stage
    paths = [str(REPO), str(REPO / "plugins"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    for path in (str(REPO / "plugins"), str(REPO)):
        if path not in sys.path:
            sys.path.insert(0, path)
    return home


def migrate(log: Path) -> None:
    with log.open("ab") as out:
        proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], stdout=out,
                              stderr=subprocess.STDOUT, env=os.environ.copy())
    if proc.returncode != 0:
        raise SystemExit(f"airflow db migrate failed; see {log}")


@contextmanager
def output_to(log: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (and the Spark JVM's, which inherits the file
    descriptors) to ``log`` while the DAGs run."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def load_dag(dag_id: str) -> Any:
    from airflow.sdk import DAG

    path = REPO / "dags" / f"{dag_id}.py"
    spec = importlib.util.spec_from_file_location(f"demo_dag_{dag_id}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return next(v for v in vars(module).values() if isinstance(v, DAG) and v.dag_id == dag_id)


def run_outcome(dr: Any) -> dict[str, Any]:
    """Task states and XCom return values of a finished DAG run, in execution order."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    tasks: dict[str, Any] = {}
    with create_session() as session:
        for ti in sorted(dr.get_task_instances(session=session), key=lambda t: (str(t.start_date or "~"),
                                                                                   t.task_id, t.map_index)):
            key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
            tasks[key] = {"state": str(ti.state), "tries": ti.try_number, "xcom": None}
        for row in session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dr.dag_id, key="return_value")):
            value = row.value
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    pass
            key = row.task_id if row.map_index < 0 else f"{row.task_id}[{row.map_index}]"
            if key in tasks:
                tasks[key]["xcom"] = value
    return {"state": str(dr.state), "run_id": dr.run_id, "tasks": tasks}


def describe_event(event: dict[str, Any] | None) -> str:
    if not event:
        return "  no committed records past the group's offsets: nothing to announce"
    ranges = ", ".join(f"{r['topic']}-{r['partition']} [{r['start']}, {r['end']})" for r in event["ranges"])
    return f"  committed-records event {event['event_id'][:12]}…: {ranges}"


def describe_task(xcom: Any) -> str:
    """One line of what a task moved, from its XCom summary."""
    if not isinstance(xcom, dict):
        return "" if xcom is None else str(xcom)[:200]
    if "report" in xcom:
        return str(xcom["report"])
    parts = []
    for key, label in (("rows_written", "rows written"), ("duplicates", "duplicates"), ("dirty", "dirty"),
                       ("clean_orders", "valid orders"), ("records_in", "in"), ("records_out", "out"),
                       ("rows_loaded", "rows loaded"), ("records", "records"),
                       ("committed", "transfers committed"), ("rejected", "rejected (aborted)"),
                       ("aborted", "aborted"), ("completed", "rolled forward"), ("expired_ids", "expired ids"),
                       ("aborted_segments", "aborted segments purged"), ("objects_deleted", "objects deleted")):
        value = xcom.get(key)
        if isinstance(value, list):
            value = len(value)
        if isinstance(value, dict):
            value = sum(v for v in value.values() if isinstance(v, int | float))
        if value is not None:
            parts.append(f"{label} {value}")
    if xcom.get("event_ids"):
        parts.append(f"event(s) {', '.join(str(i)[:12] + '…' for i in xcom['event_ids'])}")
    if xcom.get("outcome"):
        parts.append(str(xcom["outcome"]).lower())
    if xcom.get("producer_epoch") is not None:
        parts.append(f"epoch {xcom['producer_epoch']}")
    if xcom.get("target_is_fallback_sqlite"):
        parts.append(f"into SQLite {xcom.get('target')} (no PostgreSQL configured)")
    elif xcom.get("target"):
        parts.append(f"into {xcom['target']}")
    if xcom.get("message"):
        parts.append(str(xcom["message"]))
    return ", ".join(parts)


def committed_records_event(dag: Any) -> dict[str, Any] | None:
    """What the DAG's asset watcher would announce now: one poll of its trigger, here."""
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    condition = dag.timetable.asset_condition  # schedule=[asset]: all of one asset
    (asset,) = getattr(condition, "objects", [condition])
    (watcher,) = asset.watchers
    hook = TxnBrokerHook()
    try:
        payload: dict[str, Any] | None = watcher.trigger.poll_once(hook.get_conn())
        return payload
    finally:
        hook.close()


def last_txn_id() -> int:
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    hook = TxnBrokerHook()
    try:
        recent = hook.get_conn().recent_transactions(limit=1)
        return int(recent[0]["txn_id"]) if recent else 0
    finally:
        hook.close()


def transaction_counts(after_txn_id: int) -> dict[str, int]:
    """Transactions started since ``after_txn_id``, by outcome (commit, abort, open)."""
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    hook = TxnBrokerHook()
    try:
        counts: dict[str, int] = {}
        for txn in hook.get_conn().recent_transactions(limit=100_000):
            if int(txn["txn_id"]) > after_txn_id:
                outcome = (txn.get("outcome") or "open").lower()
                counts[outcome] = counts.get(outcome, 0) + 1
        return counts
    finally:
        hook.close()


def stop_spark() -> None:
    """Stop the SparkSession the stages shared (TXN_BROKER_SPARK_KEEP_SESSION)."""
    if "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()


def warehouse_line() -> str:
    url = os.environ.get("TXN_BROKER_WAREHOUSE_URL")
    if url:
        from txn_broker import mask_url

        kind = "PostgreSQL" if url.startswith("postgres") else "the database"
        return f"warehouse: loading into {kind} at {mask_url(url)} (TXN_BROKER_WAREHOUSE_URL)"
    return ("warehouse: no PostgreSQL configured (set TXN_BROKER_WAREHOUSE_URL to use one): the load step "
            f"writes to SQLite {Path(os.environ['TXN_BROKER_HOME']) / 'warehouse.db'}")


def run_demo(dag_ids: list[str], home: Path) -> int:
    log = home / "demo.log"
    print(f"Airflow demo: AIRFLOW_HOME={home}, broker home {os.environ['TXN_BROKER_HOME']}", flush=True)
    print(f"full Airflow and Spark output: {log}", flush=True)
    print(warehouse_line(), flush=True)
    print("migrating the Airflow metadata database ...", flush=True)
    migrate(log)
    with output_to(log):
        before = last_txn_id()
    results: dict[str, dict[str, Any]] = {}
    for dag_id in dag_ids:
        print(f"\nrunning {dag_id} with dag.test() ...", flush=True)
        t0 = time.perf_counter()
        with output_to(log):
            dag = load_dag(dag_id)
            event = committed_records_event(dag) if dag_id == "orders_events" else None
            dr = dag.test(run_conf={"events": [event]}) if event else dag.test()
            outcome = run_outcome(dr)
        outcome["seconds"] = time.perf_counter() - t0
        results[dag_id] = outcome
        if dag_id == "orders_events":
            print(describe_event(event))
        print(f"{dag_id}: {outcome['state']} in {outcome['seconds']:.1f}s (run {outcome['run_id']})")
        for task_id, task in outcome["tasks"].items():
            retried = f" (try {task['tries']})" if task["tries"] > 1 else ""
            print(f"  {task_id:<24} {task['state']:<8}{retried} {describe_task(task['xcom'])}")
        if event:
            with output_to(log):
                replay = run_outcome(dag.test(run_conf={"events": [event]}))
            task = next(iter(replay["tasks"].values()), {})
            print(f"  the same event again (a triggerer restart announces it twice): {replay['state']}, "
                  f"{describe_task(task.get('xcom'))}")
    with output_to(log):
        counts = transaction_counts(before)
        stop_spark()
    print(f"\ntransactions in this demo: {counts.get('commit', 0)} committed, {counts.get('abort', 0)} aborted"
          + (f", {counts['open']} still open" if counts.get("open") else ""))
    print(warehouse_line())
    script = os.path.relpath(__file__)
    print(f"Airflow UI on these runs: {os.path.relpath(sys.executable)} {script} --ui "
          "(airflow standalone, http://localhost:8080)")
    failed = [d for d, r in results.items() if r["state"] != "success"]
    if failed:
        print(f"FAILED: {', '.join(failed)}; see {log}")
    # Spark's gateway logs its shutdown when the interpreter exits: into the log, too
    sys.stdout.flush()
    sys.stderr.flush()
    with log.open("ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    return 1 if failed else 0


def run_ui(home: Path) -> int:
    """``airflow standalone`` on the demo's home; returns when it is stopped (Ctrl-C)."""
    print(f"airflow standalone: AIRFLOW_HOME={home}, DAGs {REPO / 'dags'}, plugins {REPO / 'plugins'}")
    print("UI: http://localhost:8080 (the admin password is printed below and written to "
          f"{home / 'simple_auth_manager_passwords.json.generated'})", flush=True)
    env = os.environ.copy()  # standalone starts each component as `airflow ...` from PATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    try:
        return subprocess.call([sys.executable, "-m", "airflow", "standalone"], env=env)
    except KeyboardInterrupt:
        return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dag_ids", nargs="*", help=f"DAGs to run (default: {' '.join(DAGS)})")
    parser.add_argument("--ui", action="store_true", help="start airflow standalone on the demo's home instead")
    args = parser.parse_args(argv)
    home = configure()
    if args.ui:
        return run_ui(home)
    return run_demo(args.dag_ids or list(DAGS), home)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
