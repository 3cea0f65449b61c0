"""docs/first-pipeline.md runs as printed (issue 28): its files are taken from the page's
code blocks into a fresh DAGs folder, the DAG runs with ``dag.test()`` on the embedded
broker and the SQLite warehouse, the page's CLI commands run against the result, and the
documented reprocessing run (``airflow dags trigger ... -c '{"reprocess_from": ...}'``)
processes everything again, exactly once more.

The same runs check findings of the issue: topics declared on the tasks are created by
them (2), the DAG imports from the package (1), the warehouse keeps decimals to the cent
(9), reprocessing from a date (4). Finding 8 (topics checked before Spark starts) has its
own test below, without a DAG run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from airflow_harness import REPO, AirflowSite

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.slow]

PAGE = REPO / "docs" / "first-pipeline.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
#: a paragraph that opens with a file name in backticks names the code block after it
NAMED = re.compile(r"^`([\w./-]+\.\w+)`")


def page_blocks() -> tuple[dict[str, str], list[str]]:
    """The page's files ({relative path: content}) and its shell commands, in order."""
    text = PAGE.read_text()
    files: dict[str, str] = {}
    commands: list[str] = []
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").split("\n\n")[-1].lstrip()
        named = NAMED.match(before)
        if named:
            files[named.group(1)] = match.group(2)
        elif match.group(1) == "sh":
            commands += [line.split("  #")[0].strip() for line in match.group(2).splitlines() if line.strip()]
    return files, commands


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(Path(sys.executable).parent / "txn-broker"), *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"txn-broker {shlex.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc


def warehouse_totals(path: Path) -> dict[str, Decimal]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT day, revenue FROM daily_revenue").fetchall()
    totals: dict[str, Decimal] = {}
    for day, revenue in rows:
        totals[str(day)] = totals.get(str(day), Decimal(0)) + Decimal(revenue)
    return totals


def test_first_pipeline_page_runs_as_printed(airflow_site: AirflowSite, tmp_path: Path) -> None:
    files, commands = page_blocks()
    assert set(files) == {"first_pipeline.py", "revenue_by_day.py", "landing/orders-2026-01-01.csv"}, files
    dag_source = files["first_pipeline.py"]
    assert "from txn_broker_airflow import" in dag_source and len(dag_source.splitlines()) <= 45
    dags = tmp_path / "dags"
    for name, content in files.items():
        (dags / name).parent.mkdir(parents=True, exist_ok=True)
        (dags / name).write_text(content)
    site = AirflowSite(airflow_site.home, dags, {**airflow_site.env, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)})
    home = tmp_path / "broker"

    # the CSV's sums per day, to the cent
    expected: dict[str, Decimal] = {}
    for line in files["landing/orders-2026-01-01.csv"].splitlines()[1:]:
        _order, day, amount = line.split(",")
        expected[day] = expected.get(day, Decimal(0)) + Decimal(amount)

    # two runs in one process (one Spark JVM): a plain one, then the page's reprocessing
    # run, with the conf of its `airflow dags trigger` line
    trigger = [c for c in commands if c.startswith("airflow dags trigger")]
    assert len(trigger) == 1, commands
    conf = json.loads(shlex.split(trigger[0])[-1])
    first, again = site.run_dags("first_pipeline", 2, broker_home=home, run_confs=[None, conf], timeout=900)
    assert first.state == "success", first.tail()
    assert first.xcom["ingest"]["outcome"] == "committed" and first.xcom["ingest"]["records_out"] == 4
    assert first.xcom["revenue"]["records_in"] == 4 and first.xcom["revenue"]["records_out"] == len(expected)
    assert first.xcom["load"]["target_is_fallback_sqlite"] is True
    assert first.xcom["load"]["rows_loaded"] == len(expected)
    assert "created topic orders (declared by task ingest)" in first.output
    assert "created topic revenue (declared by task revenue)" in first.output

    assert again.state == "success", again.tail()
    assert again.xcom["ingest"]["outcome"] == "already_ingested"
    assert again.xcom["revenue"]["records_in"] == 4  # every order again, from the reset group
    assert "reprocessing from 2026-01-01T00:00:00Z: group first_pipeline.revenue reset to" in again.output
    assert again.xcom["load"]["rows_loaded"] == len(expected)
    # exact to the cent in the SQLite warehouse; every day twice, once per processing
    assert warehouse_totals(home / "warehouse.db") == {day: 2 * total for day, total in expected.items()}

    # the page's CLI commands, against the same broker
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TXN_BROKER_", "AIRFLOW"))}
    env["TXN_BROKER_HOME"] = str(home)
    for command in commands:
        if not command.startswith("txn-broker"):
            continue
        out = cli(shlex.split(command)[1:], env).stdout
        if "transactions list" in command:
            assert "first_pipeline.revenue" in out and "first_pipeline.ingest" in out, out
        if "--dry-run" in command:
            assert "Would reset group first_pipeline.revenue on topic orders" in out, out
        elif "reset-offsets" in command:
            assert "Reset group first_pipeline.revenue on topic orders" in out, out


MISSING_TOPICS = r"""
import json, sys, time
from types import SimpleNamespace
from txn_broker_airflow import TransactionalSparkOperator
from txn_broker_airflow.errors import MissingTopicsError

op = TransactionalSparkOperator(task_id="stage", application="/nowhere/stage.py", inputs=["no_such_input"],
                                outputs=["no_such_output"])
ti = SimpleNamespace(dag_id="d", task_id="stage", map_index=-1, run_id="r")
started = time.monotonic()
try:
    op.execute({"ti": ti})
    error = None
except MissingTopicsError as caught:
    error = str(caught)
print(json.dumps({"error": error, "seconds": time.monotonic() - started,
                  "pyspark": any(m.split(".")[0] == "pyspark" for m in sys.modules)}))
"""


def test_spark_stage_checks_its_topics_before_spark_starts(airflow_site: AirflowSite, tmp_path: Path) -> None:
    """Finding 8: a missing input or output topic fails the task at once, naming every
    missing topic, before a Spark JVM (about 14 s) starts, and before any transaction."""
    env = airflow_site.environment(broker_home=tmp_path / "broker")
    proc = subprocess.run([sys.executable, "-c", MISSING_TOPICS], env=env, capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["error"] is not None, seen
    assert "no_such_input, no_such_output do not exist" in seen["error"] and "topics=[TopicSpec(" in seen["error"]
    assert seen["pyspark"] is False and seen["seconds"] < 10, seen
