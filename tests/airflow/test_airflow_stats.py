"""Inside Airflow, the operators' producers and consumers report through Airflow's own Stats:
a DAG run (ingest a CSV, load the topic into a table) with Airflow's StatsD metrics pointed
at a UDP port this test listens on sends the documented names (docs/observability.md)."""

from __future__ import annotations

import socket
import threading

import pytest
from test_airflow_ingest_load import ROWS, write_csv

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


class StatsdListener:
    """A UDP socket on loopback collecting StatsD lines."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            self.lines += data.decode(errors="replace").splitlines()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def total(lines: list[str], name: str) -> float:
    """The sum of a StatsD counter's increments (``name:value|c``)."""
    return sum(float(line.split(":", 1)[1].split("|")[0]) for line in lines
               if line.startswith(name + ":") and line.endswith("|c"))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the Stats path does not depend on it
def test_operators_report_through_airflow_stats(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    csv = write_csv(tmp_path / "orders.csv", ROWS)
    statsd = StatsdListener()
    try:
        result = airflow_site.run_dag(
            "txn_test_ingest_load", backend_env=backend.env, broker_home=tmp_path / "home", conf={"csv": str(csv)},
            extra_env={"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                       "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow"})
    finally:
        statsd.close()
    assert result.state == "success", result.tail()
    lines = statsd.lines
    assert total(lines, "airflow.txn_broker.records_sent.test_orders") == len(ROWS), lines[:50]
    assert total(lines, "airflow.txn_broker.bytes_sent.test_orders") > 0
    assert total(lines, "airflow.txn_broker.records_polled.test_orders") == len(ROWS)
    assert [line for line in lines if line.startswith("airflow.txn_broker.commit_duration:") and line.endswith("|ms")]
