"""The production topology, run for real (``make e2e``): PostgreSQL, moto's S3 server, Redis,
Airflow 3 with the CeleryExecutor (api-server, scheduler, dag-processor, triggerer, two
Celery workers) and a Spark standalone cluster (a master, two workers), each its own
process (tests/e2e/topology.py starts them from docker-compose.yml and .env.example).

As a user would: trigger ``orders_pipeline`` and ``bank_transfers`` through Airflow's REST
API with a token, wait for success, check the outputs are exactly once and the ledger
balances. Then faults, each followed by the same checks:

* (a) SIGKILL the Celery worker (its session: the worker, the task and its Spark
  driver) running ``clean_orders`` mid-stage: Airflow retries the task on the other worker,
  the new try fences the old one;
* (b) SIGKILL a Spark worker (its JVM and the executor it started) while
  ``daily_revenue``'s write task runs there: Spark reschedules it on the other worker, the Airflow
  task needs no retry;
* (c) SIGSTOP the Celery worker running ``check_ledger`` mid-stage: its heartbeats stop,
  Airflow declares the task failed and retries it elsewhere; SIGCONT then wakes the old
  instance, which is fenced and writes nothing.

Finally the Transactions page in headless Chromium lists these runs' transactions.
Timings (start-up, each DAG run, each fault) are printed.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from topology import AIRFLOW_WORKER, SPARK_WORKER, AirflowAPI, Topology

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.airflow, pytest.mark.spark, pytest.mark.integration]

#: executors sleep in each write task, so a stage's tasks are running long enough to be hit;
#: each sleeping task leaves a mark (point.pid.time_ns) in the topology's marks directory
TASK_WRITE_SLEEP_MS = 4000
CHROMIUM = "/usr/bin/chromium"
TIMINGS: dict[str, float] = {}


def read_all(broker, topic: str, isolation_level: str = "read_committed") -> list[dict]:  # type: ignore[no-untyped-def]
    consumer = broker.consumer(isolation_level=isolation_level)
    consumer.subscribe([topic])
    rows: list[dict] = []
    while (batch := consumer.poll(max_records=10_000)).num_rows:
        rows += batch.to_pylist()
    consumer.close()
    return rows


def wait_for(what: str, check: Callable[[], Any], timeout: float, topology: Topology, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n"
                         f"{topology.logs('airflow-scheduler', *[n for n in topology.services if 'worker' in n])}")


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    root = tmp_path_factory.mktemp("topology")
    (root / "marks").mkdir()
    spark_faults = {"TXN_BROKER_FAULTS": f"spark.task_write=sleep:{TASK_WRITE_SLEEP_MS}@{root / 'marks'}"}
    topo = Topology(root, extra_env={SPARK_WORKER: spark_faults})
    topo.start()
    TIMINGS["start-up"] = topo.timings["start-up"]
    print(f"\ntopology started in {topo.timings['start-up']:.0f}s: "
          + ", ".join(f"{k} {v:.0f}s" for k, v in topo.timings.items() if k != "start-up"))
    try:
        yield topo
    finally:
        topo.stop()
        print("\ntopology timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in TIMINGS.items()))


@pytest.fixture(scope="module")
def api(topology: Topology) -> AirflowAPI:
    v = topology.variables
    client = AirflowAPI(topology.api_url, v["AIRFLOW_ADMIN_USERNAME"], v["AIRFLOW_ADMIN_PASSWORD"])
    for dag_id in ("orders_pipeline", "bank_transfers"):
        wait_for(f"the dag-processor to parse {dag_id}", lambda d=dag_id: client.dag_exists(d), 240, topology)
        client.unpause(dag_id)
    return client


class Runs:
    """What the DAG runs so far must have produced, summed from their XComs."""

    def __init__(self) -> None:
        self.orders: list[tuple[str, dict[str, Any]]] = []
        self.bank: list[tuple[str, dict[str, Any]]] = []


RUNS = Runs()


def finish(api: AirflowAPI, topology: Topology, dag_id: str, run_id: str, timeout: float = 900) -> dict[str, Any]:
    state = wait_for(f"{dag_id} {run_id}", lambda: (s := api.run_state(dag_id, run_id)) in ("success", "failed") and s,
                     timeout, topology, interval=2)
    tasks = api.task_instances(dag_id, run_id)
    assert state == "success", f"{dag_id} {run_id}: {state}\n" + "\n".join(
        f"{t}: {ti['state']} try {ti['try_number']} on {ti.get('hostname')}" for t, ti in tasks.items()) + "\n" + \
        topology.logs(*[n for n in topology.services if "worker" in n or "scheduler" in n])
    assert {ti["state"] for ti in tasks.values()} == {"success"}
    return {task: api.xcom(dag_id, run_id, task) for task in tasks
            if task in ("generate_orders", "clean_orders", "daily_revenue", "load_revenue",
                        "execute_transfers", "check_ledger")}


def check_orders(topology: Topology) -> None:
    expected_orders = sum(x["generate_orders"]["clean_orders"] for _, x in RUNS.orders)
    expected_revenue = sum((Decimal(x["generate_orders"]["clean_revenue"]) for _, x in RUNS.orders), Decimal("0"))
    daily_rows = sum(x["daily_revenue"]["records_out"] for _, x in RUNS.orders)
    for _, x in RUNS.orders:
        assert x["clean_orders"]["outcome"] == "committed"
        assert x["clean_orders"]["records_in"] == x["generate_orders"]["rows_written"]
        assert x["clean_orders"]["records_out"] == x["generate_orders"]["clean_orders"]
        assert x["load_revenue"]["rows_loaded"] == x["daily_revenue"]["records_out"]
    with topology.connect() as broker:
        cleaned = read_all(broker, "orders_clean")
        assert len(cleaned) == expected_orders == len({r["order_id"] for r in cleaned})
        daily = read_all(broker, "revenue_daily")
        assert len(daily) == daily_rows
        assert sum(r["revenue"] for r in daily) == expected_revenue
        assert sum(r["orders"] for r in daily) == expected_orders
    engine = sa.create_engine(topology.warehouse_url)
    try:
        with engine.connect() as conn:
            total, orders, rows = conn.execute(sa.text(
                "SELECT SUM(revenue), SUM(orders), COUNT(*) FROM revenue_daily")).one()
    finally:
        engine.dispose()
    assert Decimal(str(total)).quantize(Decimal("0.01")) == expected_revenue
    assert orders == expected_orders and rows == daily_rows


def check_bank(topology: Topology) -> None:
    committed_transfers = sum(x["execute_transfers"]["committed"] for _, x in RUNS.bank)
    rejected = sum(x["execute_transfers"]["rejected"] for _, x in RUNS.bank)
    for _, x in RUNS.bank:
        assert x["check_ledger"]["outcome"] == "committed"
        assert x["check_ledger"]["records_in"] == 2 * x["execute_transfers"]["committed"]
    with topology.connect() as broker:
        committed = read_all(broker, "transfers")
        assert len(committed) == 2 * committed_transfers and sum(r["amount"] for r in committed) == 0
        legs: dict[str, list[int]] = {}
        for r in committed:
            legs.setdefault(r["transfer_id"], []).append(r["_partition"])
        assert all(len(set(p)) == 2 for p in legs.values())
        everything = read_all(broker, "transfers", "read_uncommitted")
        assert len(everything) == len(committed) + rejected
        ledger = read_all(broker, "ledger_checks")
        assert len(ledger) == len(RUNS.bank)  # one check per run: a fenced instance wrote nothing
        assert all(r["ok"] and r["unbalanced"] == 0 for r in ledger)
        assert sum(r["transfers"] for r in ledger) == committed_transfers


def stage_open(topology: Topology, tid: str) -> int | None:
    """The producer epoch of ``tid``'s open transaction, or None."""
    with topology.connect() as broker:
        txn = broker.describe_transaction(tid)
    return int(txn.producer_epoch) if txn.state == "Ongoing" else None


def write_task_running(topology: Topology, since_ns: int) -> str | None:
    """The Spark worker (service name) on which a write task sleeps now, in an executor
    (marked after ``since_ns``), or None."""
    now = time.time_ns()
    for mark in (topology.root / "marks").iterdir():
        _, pid, at = mark.name.rsplit(".", 2)
        if since_ns <= int(at) and now - int(at) < TASK_WRITE_SLEEP_MS * 1_000_000 * 0.8:
            for name, service in topology.services.items():
                if name.startswith(SPARK_WORKER) and int(pid) in service.members():
                    return name
    return None


def running_on(api: AirflowAPI, dag_id: str, run_id: str, task_id: str) -> str | None:
    ti = api.task_instances(dag_id, run_id).get(task_id) or {}
    return ti.get("hostname") if ti.get("state") == "running" else None


def worker_service(topology: Topology, api: AirflowAPI, dag_id: str, run_id: str, task_id: str) -> str:
    """The Celery worker (service name) running ``task_id``: the one whose process group
    holds the task's supervisor, titled ``airflow supervisor: <task instance id>`` (the
    hostname Airflow records is the machine's, the same for both workers here)."""
    import psutil

    ti_id = str(api.task_instances(dag_id, run_id)[task_id]["id"])
    groups = {s.pid: n for n, s in topology.services.items() if n.startswith(AIRFLOW_WORKER) and s.alive()}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if ti_id in " ".join(proc.info["cmdline"] or []) and os.getpgid(proc.info["pid"]) in groups:
                return groups[os.getpgid(proc.info["pid"])]
        except (psutil.Error, ProcessLookupError):
            continue
    raise AssertionError(f"no Celery worker runs {dag_id}.{task_id} (task instance {ti_id})")


def task_log(topology: Topology, dag_id: str, run_id: str, task_id: str, attempt: int) -> str:
    path = (topology.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
            / f"attempt={attempt}.log")
    return path.read_text(errors="replace") if path.exists() else ""


def pipelines_run(topology: Topology, api: AirflowAPI) -> None:
    started = time.monotonic()
    orders = api.trigger("orders_pipeline", {"rows": 300})
    bank = api.trigger("bank_transfers", {"transfers": 30})
    RUNS.orders.append((orders, finish(api, topology, "orders_pipeline", orders)))
    TIMINGS["orders_pipeline"] = time.monotonic() - started
    RUNS.bank.append((bank, finish(api, topology, "bank_transfers", bank)))
    TIMINGS["bank_transfers (in parallel)"] = time.monotonic() - started
    check_orders(topology)
    check_bank(topology)
    # the Celery workers both ran tasks, and no stage needed a retry
    hosts = {ti["try_number"] for d, r in (("orders_pipeline", orders), ("bank_transfers", bank))
             for ti in api.task_instances(d, r).values()}
    assert hosts == {1}
    for dag_id, run_id, task in (("orders_pipeline", orders, "clean_orders"), ("bank_transfers", bank, "check_ledger")):
        log = task_log(topology, dag_id, run_id, task, 1)
        assert topology.spark_master_url in log or "committed" in log


def celery_worker_and_spark_worker_killed(topology: Topology, api: AirflowAPI) -> None:
    """(a) then (b), in one run of orders_pipeline."""
    started = time.monotonic()
    run = api.trigger("orders_pipeline", {"rows": 300})
    tid = "orders_pipeline.clean_orders"
    epoch = wait_for("clean_orders to open its transaction",
                     lambda: running_on(api, "orders_pipeline", run, "clean_orders") and stage_open(topology, tid),
                     600, topology, interval=0.5)
    opened = time.time_ns()
    victim = worker_service(topology, api, "orders_pipeline", run, "clean_orders")
    wait_for("clean_orders' write tasks", lambda: write_task_running(topology, opened), 600, topology, interval=0.2)
    topology.services[victim].signal(signal.SIGKILL)
    killed_at = time.monotonic()

    # (b): while daily_revenue's write tasks run, lose a Spark worker
    rev = "orders_pipeline.daily_revenue"
    wait_for("daily_revenue to open its transaction",
             lambda: running_on(api, "orders_pipeline", run, "daily_revenue") and stage_open(topology, rev) is not None,
             900, topology, interval=0.5)
    opened = time.time_ns()
    spark_victim = wait_for("a daily_revenue write task", lambda: write_task_running(topology, opened), 600,
                            topology, interval=0.2)
    topology.services[spark_victim].signal(signal.SIGKILL)
    result = finish(api, topology, "orders_pipeline", run)
    RUNS.orders.append((run, result))
    TIMINGS["fault (a)+(b): orders_pipeline run"] = time.monotonic() - started
    TIMINGS["fault (a): kill to success"] = time.monotonic() - killed_at

    tries = api.tries("orders_pipeline", run, "clean_orders")
    assert [t["try_number"] for t in tries][-1] >= 2, tries
    assert result["clean_orders"]["producer_epoch"] > epoch  # the new try fenced the killed one
    with topology.connect() as broker:
        history = " ".join(h.reason for h in broker.describe_transaction(tid).history)
    assert "fence" in history or "abort" in history.lower(), history
    # (b): Spark lost the executor and rescheduled its tasks; Airflow did not retry
    assert api.task_instances("orders_pipeline", run)["daily_revenue"]["try_number"] == 1
    log = task_log(topology, "orders_pipeline", run, "daily_revenue", 1)
    assert re.search(r"Lost executor|ExecutorLostFailure|Lost task|worker lost|Worker removed", log, re.I), log[-3000:]
    check_orders(topology)

    # back to full strength for the next fault
    i = int(victim.rsplit("-", 1)[1])
    topology.start_airflow_worker(i)
    topology.start_spark_worker(int(spark_victim.rsplit("-", 1)[1]))
    wait_for("the replaced workers", lambda: len(topology.alive_spark_workers()) == 2
             and len(topology.celery_workers()) == 2, 240, topology, interval=2)


def zombie_is_fenced(topology: Topology, api: AirflowAPI) -> None:
    """(c) a Celery worker stopped mid-stage: Airflow gives up on it and retries; woken
    up, the old instance is fenced."""
    started = time.monotonic()
    run = api.trigger("bank_transfers", {"transfers": 30})
    tid = "bank_transfers.check_ledger"
    epoch = wait_for("check_ledger to open its transaction",
                     lambda: running_on(api, "bank_transfers", run, "check_ledger") and stage_open(topology, tid),
                     600, topology, interval=0.5)
    opened = time.time_ns()
    victim = worker_service(topology, api, "bank_transfers", run, "check_ledger")
    wait_for("check_ledger's write tasks", lambda: write_task_running(topology, opened), 600, topology, interval=0.2)
    topology.services[victim].signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        wait_for("Airflow to retry check_ledger", lambda: api.task_instances("bank_transfers", run)
                 ["check_ledger"]["try_number"] >= 2, 300, topology, interval=2)
        TIMINGS["fault (c): stop to retry"] = time.monotonic() - stopped_at
        result = finish(api, topology, "bank_transfers", run)
    finally:
        topology.services[victim].signal(signal.SIGCONT)
    RUNS.bank.append((run, result))
    assert result["check_ledger"]["producer_epoch"] > epoch
    # the woken instance finds itself fenced (or its supervisor stops it): give it time to try
    time.sleep(15)
    TIMINGS["fault (c): bank_transfers run"] = time.monotonic() - started
    with topology.connect() as broker:
        txn = broker.describe_transaction(tid)
        assert txn.producer_epoch == result["check_ledger"]["producer_epoch"]
        history = " ".join(h.reason for h in txn.history)
    assert "fence" in history or "abort" in history.lower(), history
    check_bank(topology)
    check_orders(topology)


def transactions_page_lists_the_runs(topology: Topology) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make install does)")
    from playwright.sync_api import expect, sync_playwright

    v = topology.variables
    started = time.monotonic()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{topology.api_url}/")
            page.wait_for_url(re.compile(r".*/auth/login.*"))
            page.locator("input[name=username]").fill(v["AIRFLOW_ADMIN_USERNAME"])
            page.locator("input[name=password]").fill(v["AIRFLOW_ADMIN_PASSWORD"])
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda url: "/auth/" not in url)
            page.get_by_role("link", name="Transactions").first.click()
            page.wait_for_url(re.compile(r".*/plugin/transactions.*"))
            frame = page.frame_locator("iframe[title='Transactions']")
            for tid in ("orders_pipeline.clean_orders", "orders_pipeline.daily_revenue", "bank_transfers.check_ledger",
                        "orders_pipeline.ingest_orders"):
                row = frame.locator(f"tr[data-transactional-id='{tid}']")
                expect(row).to_be_visible(timeout=60_000)
                expect(row.locator("[data-state]")).to_have_text("CompleteCommit", timeout=60_000)
        finally:
            browser.close()
    TIMINGS["transactions page"] = time.monotonic() - started
    assert os.environ.get("TXN_BROKER_FAULTS") is None  # the faults stayed in the Spark workers


@pytest.mark.ui
@pytest.mark.timeout(2400)
def test_topology(topology: Topology, api: AirflowAPI) -> None:
    """One test, the phases in order: they share the running topology and the runs so far
    (pytest-xdist would otherwise spread them over workers, each with its own topology)."""
    pipelines_run(topology, api)
    celery_worker_and_spark_worker_killed(topology, api)
    zombie_is_fenced(topology, api)
    transactions_page_lists_the_runs(topology)
