"""Fixtures of the Airflow tests (helpers in airflow_harness.py).

``airflow_site`` (session): an AIRFLOW_HOME in a temporary directory with a SQLite metadata
database migrated once (``airflow db migrate``), a DAGs folder holding the repository's
DAGs plus ``dag_files/`` (symlinks), and the repository's plugins folder. DAGs run with
``dag.test()`` in a fresh subprocess each (``dag_runner.py``), so Airflow's process-wide
state never leaks between tests or into other tiers of the suite.

Backends: the broker's own tiers (unit, integration, cli, fuzz, chaos) run every scenario
on both backends. Here a DAG run costs a minute or more of Spark and Airflow start-up, so
each end-to-end scenario runs on one backend (``parametrize("backend", [...], indirect=True)``),
chosen so that the tier as a whole covers both: PostgreSQL + S3 for the zombie, the orders
pipeline, ingest and load, the timeout sensor; SQLite + a local directory for the retried
stage, bank transfers, maintenance, the listener and the scheduler test.

``airflow_env`` (function): the same settings in this process's environment, for the few
tests that import Airflow in-process (trigger serialisation, the hook).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from airflow_harness import AirflowSite, link_dags, site_settings


@pytest.fixture(scope="session")
def airflow_site(tmp_path_factory: pytest.TempPathFactory) -> AirflowSite:
    home = tmp_path_factory.mktemp("airflow_home")
    dags = home / "dags"
    link_dags(dags)
    site = AirflowSite(home, dags, site_settings(home, dags, f"sqlite:///{home / 'airflow.db'}"))
    proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=site.environment(),
                          capture_output=True, text=True, timeout=300, cwd=home)
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return site


@pytest.fixture
def airflow_env(airflow_site: AirflowSite, monkeypatch: pytest.MonkeyPatch) -> Iterator[AirflowSite]:
    for key in [k for k in os.environ if k.startswith("AIRFLOW_CONN_")]:
        monkeypatch.delenv(key)
    for key, value in airflow_site.env.items():
        monkeypatch.setenv(key, value)
    yield airflow_site
