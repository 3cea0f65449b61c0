"""Secrets never appear in logs, exceptions or CLI output.

A run is configured with known secrets (the database password, the S3 secret key, a
login password handed to ``create_login``), with every logger at DEBUG and SQLAlchemy's
statement log on; it works normally and then fails in every way we can provoke
(unreachable database, wrong database, refused privilege, unreachable S3, fenced
producer, bad input). Everything it printed, logged and raised, tracebacks included, is
scanned for the secrets. The CLI is run the same way, its stdout and stderr scanned.

XCom and the UI are the Airflow layer's; see the report in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from txn_broker.database import Database
from txn_broker.roles import CLIENT, apply_roles, create_login

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

WORKLOAD = textwrap.dedent("""
    import logging, os, sys, traceback
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sqlalchemy.engine").setLevel(logging.DEBUG)  # statements and parameters
    import txn_broker
    from txn_broker import TopicPartition
    from txn_broker.database import Database
    from txn_broker.roles import create_login

    def attempt(label, call):
        try:
            result = call()
            print(label, "ok", repr(result)[:3000])
        except Exception as error:
            print(label, "raised", type(error).__name__, error, repr(error))
            traceback.print_exc()

    url, storage = os.environ["TXN_BROKER_DATABASE_URL"], os.environ["TXN_BROKER_STORAGE_URL"]
    broker = txn_broker.connect()
    print(repr(broker), broker._db.url, repr(broker._db.url), broker._db.engine, broker._store.url)
    broker.create_topic("s", partitions=2)
    p = broker.producer(transactional_id="secret-test")
    p.init_transactions()
    with p.transaction():
        p.send("s", [{"key": b"k", "value": b"v"}], partition=0)
    c = broker.consumer(group_id="g")
    c.subscribe(["s"])
    print(c.poll().to_pylist())
    c.commit()
    print(broker.describe_transaction("secret-test"))
    print(broker.list_transactions(), broker.describe_group("g"), broker.describe_topic("s"))
    old = broker.producer(transactional_id="secret-test")
    attempt("fenced", lambda: (old.init_transactions(), p.begin_transaction(),
                               p.send("s", [{"key": b"k", "value": b"v"}], partition=0),
                               p.flush()))  # the fencing surfaces at the next call that waits
    attempt("bad input", lambda: broker.producer().send("s", [{"nope": 1}]))
    attempt("unreachable database", lambda: txn_broker.connect(
        url.replace(os.environ["PG_HOSTPORT"], "127.0.0.1:9"), storage))
    attempt("missing database", lambda: txn_broker.connect(url.rsplit("/", 1)[0] + "/no_such_db", storage))
    attempt("unparsable url", lambda: txn_broker.connect(url.replace("postgresql+psycopg2", "postgres ql"), storage))
    attempt("refused privilege", lambda: create_login(broker._db, "x_user", os.environ["LOGIN_SECRET"],
                                                      "txn_broker_monitor"))
    attempt("refused DDL", lambda: broker._db.run(lambda tx: tx.raw("DROP TABLE segments")))
    os.environ["TXN_BROKER_S3_ENDPOINT_URL"] = "http://127.0.0.1:9"
    from txn_broker.storage.s3 import S3ObjectStore
    s3 = S3ObjectStore("bucket", "prefix", retry_budget_ms=0)
    attempt("unreachable s3", lambda: s3.put("k", b"data"))
    attempt("s3 list", lambda: list(s3.list()))
    # the secret key passed explicitly (storage options), retried on an unreachable endpoint
    from txn_broker.storage import open_store
    explicit = open_store("s3://bucket/prefix", retry_budget_ms=200, endpoint_url="http://127.0.0.1:9",
                          aws_access_key_id="explicit", aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])
    print(repr(explicit), sorted(explicit.options()))
    attempt("explicit s3", lambda: explicit.get("k"))
    broker.close()
""")


@pytest.fixture
def secret_run(pg_server, pg_template, s3_server, tmp_path):
    """A database reachable only with a known password, as the client role."""
    db_secret = f"DbPw-{uuid.uuid4().hex}"
    s3_secret = f"S3Key-{uuid.uuid4().hex}"
    login_secret = f"LoginPw-{uuid.uuid4().hex}"
    name = f"secrets_{uuid.uuid4().hex[:8]}"
    user = f"client_{uuid.uuid4().hex[:6]}"
    pg_server.new_database(name, template=pg_template)
    admin = Database(pg_server.url(name))
    apply_roles(admin)  # grants on this database's tables
    create_login(admin, user, db_secret, CLIENT)
    admin.dispose()
    url = f"postgresql+psycopg2://{user}:{db_secret}@{pg_server.host}:{pg_server.port}/{name}"
    env = {**os.environ,
           "TXN_BROKER_DATABASE_URL": url,
           "TXN_BROKER_STORAGE_URL": f"s3://{s3_server.new_bucket()}/segments",
           "TXN_BROKER_S3_ENDPOINT_URL": s3_server.endpoint_url,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": s3_secret,
           "AWS_DEFAULT_REGION": "us-east-1",
           "PG_HOSTPORT": f"{pg_server.host}:{pg_server.port}", "LOGIN_SECRET": login_secret,
           "PYTHONPATH": str(ROOT), "TXN_BROKER_HOME": str(tmp_path / "home")}
    yield env, [db_secret, s3_secret, login_secret]
    pg_server.drop_database(name)


def assert_no_secret(text: str, secrets: list[str]) -> None:
    for secret in secrets:
        for form in {secret, quote(secret, safe=""), secret.encode().hex()}:
            assert form not in text, f"a secret leaked: ...{text[max(text.find(form) - 300, 0):text.find(form) + 50]}"


def test_library_logs_and_exceptions_hold_no_secret(secret_run):
    env, secrets = secret_run
    result = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    # the run did reach every failure, so the scan covers them
    for label, error in [("fenced", "InvalidProducerEpochError"), ("bad input", "SchemaMismatchError"),
                         ("unreachable database", "DatabaseUnavailableError"),
                         ("missing database", "DatabaseUnavailableError"),
                         ("refused privilege", "DatabasePermissionError"),
                         ("refused DDL", "DatabasePermissionError"),
                         ("unreachable s3", "StorageUnavailableError"),
                         ("explicit s3", "StorageUnavailableError")]:
        assert f"{label} raised {error}" in result.stdout, (label, result.stdout[-3000:])
    assert "***" in output  # URLs were printed, masked
    assert "DEBUG sqlalchemy.engine" in output or "INFO sqlalchemy.engine" in output  # statements were logged
    assert_no_secret(output, secrets)


def cli(env, *args, stdin=None):
    return subprocess.run([sys.executable, "-m", "txn_broker.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT, input=stdin)


def test_cli_output_holds_no_secret(secret_run, tmp_path):
    env, secrets = secret_run
    records = tmp_path / "r.jsonl"
    records.write_text("".join(json.dumps({"key": "a2V5", "value": "dmFsdWU="}) + "\n" for _ in range(3)))
    url = env["TXN_BROKER_DATABASE_URL"]
    runs = [
        ("topics", "create", "c", "--partitions", "2"),
        ("topics", "list"),
        ("--json", "topics", "describe", "c"),
        ("produce", "c", "--file", str(records), "--transactional-id", "cli-t"),
        ("consume", "c", "--from-beginning", "--group", "cg", "--commit"),
        ("--json", "transactions", "describe", "cli-t"),
        ("groups", "describe", "cg"),
        ("--json", "fsck"),
        ("--debug", "topics", "describe", "missing"),
        ("--debug", "--database-url", url.rsplit("/", 1)[0] + "/no_such_db", "topics", "list"),
        ("--debug", "--database-url", url.replace(env["PG_HOSTPORT"], "127.0.0.1:9"), "topics", "list"),
        ("--database-url", url.replace("postgresql+psycopg2", "postgres ql"), "topics", "list"),
        ("--debug", "--json", "db", "upgrade"),
    ]
    outputs = []
    for args in runs:
        result = cli(env, *args)
        outputs.append((args, result.returncode, result.stdout + result.stderr))
    assert [code for _a, code, _o in outputs[:8]] == [0] * 8, outputs[:8]
    assert all(code != 0 for _a, code, _o in outputs[8:12]), outputs[8:12]
    for args, _code, text in outputs:
        for secret in secrets:
            assert secret not in text and quote(secret, safe="") not in text, (args, text[-2000:])
