"""Helpers of the UI tests (fixtures in conftest.py): a real ``airflow api-server`` with the
repository's plugins, and the broker data the page shows.

The api-server runs in its own process group with a temporary AIRFLOW_HOME (SQLite
metadata database, the simple auth manager with an ``admin`` and a ``viewer`` user whose
passwords the tests know), reads the broker through an ``AIRFLOW_CONN_TXN_BROKER_DEFAULT``
connection whose database URL and S3 secret are distinctive strings the tests look for
in every answer, and is polled on its health endpoint with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import requests

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

USERS = {"admin": "admin-Pw-4c1e", "viewer": "viewer-Pw-9d2a"}
ORDERS_SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.float64())])

#: transactional ids the tests look for
COMMITTED = "ui.pipeline.load_orders"
ONGOING = "ui.pipeline.transform"          # aborted in the browser test
MAPPED_ONGOING = "ui.pipeline.publish.0"    # committed by the browser test while a page is open
API_ABORT = "ui.pipeline.publish.1"         # aborted by the API test
HANGING = "ui.pipeline.stuck"               # past its 1 s timeout, never swept
XSS_ID = '<script>alert("xss")</script>'
XSS_TASK_ID = "ui.pipeline.<img src=x onerror=alert(2)>"
GROUP = "orders-loader"
#: an ``iceberg.enabled`` topic whose table is behind, and a group lagging on it
LAKE, LAKE_GROUP = "lake", "lake-reader"


def clean_environment() -> dict[str, str]:
    """This process's environment without Airflow, broker or AWS settings."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "TXN_BROKER_", "_AIRFLOW", "AWS_"))}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class UiBroker:
    """The broker behind the page: a PostgreSQL database and an S3 bucket. The api-server
    connects as its own role, whose password (like the S3 secret) must never be shown."""

    admin_url: str
    ui_url: str
    storage_url: str
    endpoint_url: str
    db_password: str
    s3_secret: str

    def connect(self) -> Any:
        import txn_broker

        return txn_broker.connect(self.admin_url, self.storage_url)

    def connection_json(self) -> str:
        return json.dumps({"conn_type": "txn_broker", "extra": {
            "database_url": self.ui_url, "storage_url": self.storage_url, "endpoint_url": self.endpoint_url,
            "aws_access_key_id": "ui-test-access-key", "aws_secret_access_key": self.s3_secret,
            "region_name": "us-east-1"}})

    @property
    def secrets(self) -> list[str]:
        return [self.db_password, self.s3_secret]


@dataclass
class Seeded:
    """Producers holding their transactions open for the tests (closed at teardown)."""

    broker: Any
    open_producers: dict[str, Any] = field(default_factory=dict)

    def commit(self, tid: str) -> None:
        self.open_producers.pop(tid).commit_transaction()

    def close(self) -> None:
        for producer in self.open_producers.values():
            try:
                producer.abort_transaction()
            except Exception:  # already aborted by a test (fenced): nothing left to do
                pass
        self.open_producers.clear()
        self.broker.close()


def _orders(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"order_id": f"o-{i}", "amount": float(i)} for i in range(start, start + n)]


def seed(broker: Any) -> Seeded:
    """Topics, one committed transaction with group offsets, three open ones (one past its
    timeout) and transactional ids that are HTML."""
    seeded = Seeded(broker)
    broker.create_topic("orders", partitions=2, schema=ORDERS_SCHEMA)
    broker.create_topic("payments", partitions=1, schema=ORDERS_SCHEMA)

    ingest = broker.producer(transactional_id="ui.pipeline.ingest")
    ingest.init_transactions()
    with ingest.transaction():
        ingest.send("payments", _orders(4), partition=0)
    from txn_broker import TopicPartition

    committed = broker.producer(transactional_id=COMMITTED)
    committed.init_transactions()
    with committed.transaction():
        committed.send("orders", _orders(5), partition=0)
        committed.send("orders", _orders(3, 5), partition=1)
        committed.send_offsets_to_transaction({TopicPartition("payments", 0): 4}, GROUP)

    for tid in (XSS_ID, XSS_TASK_ID):
        p = broker.producer(transactional_id=tid)
        p.init_transactions()
        with p.transaction():
            p.send("payments", _orders(1, 100), partition=0)

    for tid, partition, count, timeout_ms in ((ONGOING, 0, 4, 600_000), (MAPPED_ONGOING, 1, 2, 600_000),
                                              (API_ABORT, 1, 1, 600_000), (HANGING, 0, 1, 1000)):
        topic = "payments" if tid == HANGING else "orders"
        p = broker.producer(transactional_id=tid, transaction_timeout_ms=timeout_ms)
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, _orders(count, 200), partition=0 if topic == "payments" else partition)
        p.flush()
        seeded.open_producers[tid] = p

    # an Iceberg topic whose table is behind: 3 records published, 3 more committed since,
    # a group that has read 1 of them, and an open transaction above them
    from txn_broker import TopicSpec

    broker.ensure_topics([TopicSpec(LAKE, 2, ORDERS_SCHEMA, {"iceberg.enabled": "true"})])
    lake = broker.producer(transactional_id="ui.lake.ingest")
    lake.init_transactions()
    with lake.transaction():
        lake.send(LAKE, _orders(3), partition=0)
    broker.publish_iceberg([LAKE])
    with lake.transaction():
        lake.send(LAKE, _orders(2, 3), partition=0)
        lake.send(LAKE, _orders(1, 5), partition=1)
    broker.commit_offsets(LAKE_GROUP, {TopicPartition(LAKE, 0): 1, TopicPartition(LAKE, 1): 0})
    held = broker.producer(transactional_id="ui.lake.late", transaction_timeout_ms=600_000)
    held.init_transactions()
    held.begin_transaction()
    held.send(LAKE, _orders(2, 300), partition=1)  # open: holds lake-1's last stable offset back
    held.flush()
    seeded.open_producers["ui.lake.late"] = held
    return seeded


class AirflowUIServer:
    """``airflow api-server`` with the repository's plugins folder, in its own process group."""

    def __init__(self, home: Path, ui_broker: UiBroker) -> None:
        self.home = home
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps(USERS))
        self.env = {
            **clean_environment(),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(HERE / "dag_files"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__AUTH_MANAGER":
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API__SECRET_KEY": uuid.uuid4().hex,
            "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
            "AIRFLOW__API__EXPOSE_CONFIG": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW_CONN_TXN_BROKER_DEFAULT": ui_broker.connection_json(),
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins")]),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home / "api-server.log"

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, cwd=self.home)
        if proc.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return proc

    def start(self, timeout: float = 180) -> None:
        self.cli("db", "migrate")
        self.cli("dags", "reserialize")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(self.port),
                 "--workers", "1"],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.home, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"api-server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"api-server not healthy after {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 80) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def token(self, user: str) -> str:
        """A JWT for ``user`` from the simple auth manager's login endpoint."""
        response = requests.post(self.url("/auth/token"), json={"username": user, "password": USERS[user]},
                                 timeout=30)
        assert response.status_code == 201, response.text
        return str(response.json()["access_token"])

    def stop(self) -> None:
        """SIGTERM the api-server's process group, SIGKILL it after a deadline."""
        if self.proc is None:
            return
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        _signal_group(self.proc.pid, signal.SIGKILL)  # workers that outlived the server


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the whole group has exited
        pass


#: the committed-records event the UI tests attach to a run of ``ui.pipeline``
EVENT_RUN_ID = "asset_triggered__ui_events_1"
EVENT_PAYLOAD = {
    "kind": "txn_broker.committed_records", "event_id": "e" * 32, "group_id": GROUP, "topics": ["orders"],
    "ranges": [{"topic": "orders", "partition": 0, "start": 3, "end": 10},
               {"topic": "orders", "partition": 1, "start": 0, "end": 4}], "offsets": 11,
}

_SEED_EVENT_RUN = """
import json, sys
import pendulum
from airflow.models.asset import AssetEvent, AssetModel
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState
from airflow.utils.types import DagRunTriggeredByType, DagRunType

payload, run_id = json.loads(sys.argv[1]), sys.argv[2]
now = pendulum.now("UTC")
with create_session() as session:
    if session.query(DagRun).filter_by(dag_id="ui.pipeline", run_id=run_id).count():
        sys.exit(0)  # seeded by an earlier test
    asset = AssetModel(uri="txn-committed://txn_broker_default/orders/" + payload["group_id"],
                       name="orders committed", group="txn_topic")
    session.add(asset)
    session.flush()
    event = AssetEvent(asset_id=asset.id, extra={"from_trigger": True, "payload": payload}, timestamp=now)
    session.add(event)
    session.flush()
    run = DagRun(dag_id="ui.pipeline", run_id=run_id, run_type=DagRunType.ASSET_TRIGGERED,
                 state=DagRunState.SUCCESS, logical_date=None, run_after=now, start_date=now,
                 triggered_by=DagRunTriggeredByType.ASSET)
    run.consumed_asset_events.append(event)
    session.add(run)
"""


def seed_event_run(server: AirflowUIServer) -> None:
    """A DAG run of ``ui.pipeline`` started by a committed-records asset event, written
    through Airflow's own ORM into the api-server's metadata database (once)."""
    proc = subprocess.run([sys.executable, "-c", _SEED_EVENT_RUN, json.dumps(EVENT_PAYLOAD), EVENT_RUN_ID],
                          env=server.env, capture_output=True, text=True, timeout=120, cwd=server.home)
    assert proc.returncode == 0, proc.stderr[-3000:]
