"""Credentials never reach XCom or the task logs: the operators run with passwords in their
connections (the broker's database URL, with its password as user-info or as a query
parameter, and S3 secret key in ``txn_broker`` extras, a
warehouse password in a Postgres connection), one task fails while connecting, and then
every XCom value, the whole dag.test output and every log file are scanned for them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_no_password_in_xcom_or_logs(airflow_site, backend, pg_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    db_password = "dbpw" + uuid.uuid4().hex
    s3_secret = "s3sk" + uuid.uuid4().hex
    role = f"r_{uuid.uuid4().hex[:8]}"
    pg_server.admin(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{db_password}'")
    host = f"{pg_server.host}:{pg_server.port}"
    broker_db = backend.database_url.rsplit("/", 1)[1]
    warehouse_db = f"wh_{uuid.uuid4().hex[:10]}"
    pg_server.new_database(warehouse_db)
    broker_url = f"postgresql+psycopg2://{role}:{db_password}@{host}/{broker_db}"
    s3 = {"storage_url": backend.storage_url, "endpoint_url": backend.env["TXN_BROKER_S3_ENDPOINT_URL"],
          "aws_access_key_id": "testing", "aws_secret_access_key": s3_secret, "region_name": "us-east-1"}
    connections = {
        "AIRFLOW_CONN_TXN_BROKER_DEFAULT": json.dumps(
            {"conn_type": "txn_broker", "extra": {"database_url": broker_url, **s3}}),
        # nothing listens on port 9 of localhost: the connect fails, with the password in hand
        "AIRFLOW_CONN_TXN_TEST_UNREACHABLE": json.dumps(
            # (the password as a query parameter: masked by the same rule as user-info)
            {"conn_type": "txn_broker", "extra": {"database_url": f"postgresql+psycopg2://{role}@127.0.0.1:9/"
                                                                  f"{broker_db}?password={db_password}", **s3}}),
        "AIRFLOW_CONN_TXN_TEST_WAREHOUSE": f"postgresql://{role}:{db_password}@{host}/{warehouse_db}",
    }
    csv = tmp_path / "orders.csv"
    csv.write_text("order_id,amount,day\no1,1.5,2024-01-01\no2,2.5,2024-01-01\no3,3.5,2024-01-02\n")
    # the backend's own settings are left out: everything must come from the connections
    result = airflow_site.run_dag("txn_test_secrets", broker_home=tmp_path / "home", extra_env=connections,
                                  conf={"csv": str(csv)})

    assert result.task_state("load") == "success", result.tail()
    assert result.xcom["load"]["rows_loaded"] == 3
    assert result.task_state("unreachable") == "failed"
    assert "DatabaseUnavailableError" in result.output  # the error is reported, masked
    assert "***" in result.xcom["load"]["target"]
    assert f"{role}:***@" in result.output  # the hook logged where it connected, masked

    scanned = {"xcom": json.dumps(result.xcom, default=str), "dag.test output": result.output}
    for path in Path(airflow_site.home, "logs").rglob("*"):
        if path.is_file():
            scanned[str(path)] = path.read_text(errors="replace")
    for where, text in scanned.items():
        for secret in (db_password, s3_secret):
            assert secret not in text, f"a secret appears in {where}"
