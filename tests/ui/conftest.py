"""Fixtures of the UI tests (helpers in ui_harness.py).

``ui_broker`` (session): a PostgreSQL database (cloned from the migrated template) and an
S3 bucket on the suite's servers, plus a login role with a distinctive password for the
api-server. ``ui_data`` (session): the seeded transactions, with open producers.
``ui_server`` (session): a real ``airflow api-server`` with the plugin, reading that broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from ui_harness import AirflowUIServer, Seeded, UiBroker, seed


@pytest.fixture(scope="session")
def ui_broker(pg_server, s3_server, pg_template) -> UiBroker:  # type: ignore[no-untyped-def]
    name = f"ui_{uuid.uuid4().hex[:10]}"
    admin_url = pg_server.new_database(name, template=pg_template)
    role, password = f"txnb_ui_{uuid.uuid4().hex[:8]}", f"Ui-Db-Secret-{uuid.uuid4().hex[:12]}"
    pg_server.admin(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'", f'GRANT CONNECT ON DATABASE "{name}" TO {role}')
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in (f"GRANT USAGE ON SCHEMA public TO {role}",
                              f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
                              f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role}"):
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()
    ui_url = sa.make_url(admin_url).set(username=role, password=password).render_as_string(hide_password=False)
    bucket = s3_server.new_bucket()
    return UiBroker(admin_url, ui_url, f"s3://{bucket}/segments", s3_server.endpoint_url, password,
                    f"Ui-S3-Secret-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def ui_data(ui_broker: UiBroker) -> Iterator[Seeded]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TXN_BROKER_S3_ENDPOINT_URL", ui_broker.endpoint_url)
        seeded = seed(ui_broker.connect())
        yield seeded
        seeded.close()


@pytest.fixture(scope="session")
def ui_server(ui_broker: UiBroker, ui_data: Seeded, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[AirflowUIServer]:
    server = AirflowUIServer(tmp_path_factory.mktemp("airflow_ui_home"), ui_broker)
    try:
        server.start()
        yield server
    finally:
        server.stop()
