"""Least privilege on PostgreSQL (sql/roles.sql): connect as each role and check what it
may do and what it may not.

* owner: runs the migrations (which apply the grants) and may change the schema;
* client: a full produce / transaction / consume / sweep cycle, and no DDL, no TRUNCATE,
  no rewriting of the transaction log's history or of the migrations table;
* monitor: describes and lists everything, writes nothing, cannot abort a transaction.

The privileges in roles.sql are also checked against what sql/queries.sql needs: a query
added without its grant, or a grant no query uses, fails here.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict

import pytest
import sqlalchemy as sa

import txn_broker
from txn_broker import TopicPartition
from txn_broker import sql as sql_files  # type: ignore[attr-defined]
from txn_broker.database import Database
from txn_broker.errors import DatabasePermissionError, InvalidConfigError, InvalidNameError
from txn_broker.migrations import upgrade
from txn_broker.roles import CLIENT, MONITOR, OWNER, apply_roles, create_login, roles_script, split_script

pytestmark = pytest.mark.integration


# -- roles.sql against queries.sql (no server needed) ---------------------------------------


def needed_privileges() -> dict[str, set[str]]:
    """What each table needs for the named queries, read from their SQL."""
    need: dict[str, set[str]] = defaultdict(set)
    for sql in sql_files.load_queries().values():
        text = re.sub(r"--[^\n]*", "", sql)
        reads = set(re.findall(r"\b(?:FROM|JOIN)\s+([a-z_]+)", text, re.I))
        for table in re.findall(r"\bINSERT\s+INTO\s+([a-z_]+)", text, re.I):
            need[table].add("INSERT")
            if re.search(r"\bRETURNING\b", text, re.I):
                need[table].add("SELECT")
            if re.search(r"ON\s+CONFLICT[^;]*DO\s+UPDATE", text, re.I | re.S):
                need[table].add("UPDATE")
        for table in re.findall(r"\bUPDATE\s+([a-z_]+)\s+SET\b", text, re.I):
            need[table] |= {"UPDATE", "SELECT"}
        deleted = set(re.findall(r"\bDELETE\s+FROM\s+([a-z_]+)", text, re.I))
        for table in deleted:
            need[table] |= {"DELETE", "SELECT"}
        for table in reads - deleted:
            need[table].add("SELECT")
        if "{for_update}" in text or "{skip_locked}" in text:
            locked = re.search(r"\bFROM\s+([a-z_]+)", text, re.I)
            assert locked
            need[locked.group(1)].add("UPDATE")
    need["schema_migrations"].add("SELECT")  # require_current()
    # the default Iceberg catalog: pyiceberg's SqlCatalog inserts, updates (its commit's
    # compare-and-set) and deletes (drop table, namespace properties) its own rows
    for table in ("iceberg_tables", "iceberg_namespace_properties"):
        need[table] |= {"SELECT", "INSERT", "UPDATE", "DELETE"}
    return {t: p for t, p in need.items() if not t.startswith("pg_")}


def granted_privileges() -> dict[str, set[str]]:
    rows = re.findall(r"\('([a-z_]+)',\s*'([A-Z, ]+)'\)", sql_files.roles())
    return {table: {p.strip() for p in privileges.split(",")} for table, privileges in rows}


def test_client_grants_are_exactly_what_the_queries_need():
    need, granted = needed_privileges(), granted_privileges()
    missing = {t: sorted(p - granted.get(t, set())) for t, p in need.items() if p - granted.get(t, set())}
    assert not missing, f"add to sql/roles.sql: {missing}"
    unused = {t: sorted(p - need.get(t, set()) - {"SELECT"}) for t, p in granted.items()
              if p - need.get(t, set()) - {"SELECT"}}
    assert not unused, f"privileges no query needs (remove them from sql/roles.sql): {unused}"


def test_every_table_of_the_schema_has_grants():
    tables = set(re.findall(r"CREATE TABLE ([a-z_]+)", sql_files.schema()))
    assert tables == set(granted_privileges())


def test_the_derivation_sees_privileges():
    """The parser above is not vacuous: it finds what a few known queries need."""
    need = needed_privileges()
    assert {"UPDATE", "SELECT"} <= need["counters"]  # next_id: UPDATE ... RETURNING
    assert "UPDATE" in need["transactional_ids"]  # locked with FOR UPDATE
    assert "DELETE" in need["transactional_ids"]
    assert need["txn_state_log"] == {"SELECT", "INSERT"}  # the history is append-only


def test_role_names_are_validated():
    assert "CREATE ROLE %I NOLOGIN" in roles_script()
    renamed = roles_script(owner="o1", client="c1", monitor="m1")
    assert "txn_broker_client" not in renamed and "TO c1" in renamed
    for bad in ["", "Robert'); DROP TABLE segments;--", "pg_monitor", "a b", "x" * 64, None]:
        with pytest.raises(InvalidNameError):
            roles_script(client=bad)
    with pytest.raises(InvalidNameError):
        roles_script(owner="same", client="same", monitor="m")


def test_script_splitting_keeps_do_blocks_whole():
    statements = split_script(sql_files.roles())
    assert len(statements) == 4
    assert statements[0].startswith("DO $$") and statements[0].endswith("$$")
    assert all(":" not in s.replace("::", "") for s in statements)  # safe for text()


def test_roles_need_postgresql(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/x.db")
    with pytest.raises(InvalidConfigError):
        apply_roles(db)
    db.dispose()


# -- connecting as each role ----------------------------------------------------------------


def url_as(pg, user: str, password: str, database: str) -> str:
    return f"postgresql+psycopg2://{user}:{password}@{pg.host}:{pg.port}/{database}"


@pytest.fixture(scope="module")
def roles_db(pg_server, tmp_path_factory):
    """A database owned by the owner role, migrated by the owner's login, with one login
    per role; yields ``{role: url}``."""
    suffix = uuid.uuid4().hex[:8]
    admin = Database(pg_server.url("postgres"))
    apply_roles(admin)  # as an administrator: creates the group roles
    logins = {}
    for role in (OWNER, CLIENT, MONITOR):
        user, password = f"{role.split('_')[-1]}_{suffix}", f"pw-{uuid.uuid4().hex}"
        create_login(admin, user, password, role)
        logins[role] = (user, password)
    admin.dispose()
    name = f"roles_{suffix}"
    owner_user = logins[OWNER][0]
    pg_server.admin(f'CREATE DATABASE "{name}" OWNER {OWNER}',
                    f'ALTER ROLE "{owner_user}" IN DATABASE "{name}" SET role = {OWNER}')
    urls = {role: url_as(pg_server, user, password, name) for role, (user, password) in logins.items()}
    applied = upgrade(urls[OWNER])  # migrations as the owner; they apply the grants too
    assert applied
    storage = (tmp_path_factory.mktemp("roles") / "segments").as_uri()
    yield {"urls": urls, "storage": storage, "name": name}
    pg_server.drop_database(name)


def raw(url: str, statement: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
    finally:
        engine.dispose()


def test_owner_owns_the_schema_and_may_change_it(roles_db):
    url = roles_db["urls"][OWNER]
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        owners = {r[0] for r in conn.execute(sa.text(
            "SELECT tableowner FROM pg_tables WHERE schemaname = 'public'"))}
        assert owners == {OWNER}
    engine.dispose()
    raw(url, "CREATE TABLE scratch (x int)")
    raw(url, "DROP TABLE scratch")


def test_client_runs_the_whole_data_path(roles_db):
    broker = txn_broker.connect(roles_db["urls"][CLIENT], roles_db["storage"])
    try:
        broker.create_topic("orders", partitions=2)
        broker.create_topic("copies", partitions=2)
        producer = broker.producer(transactional_id="ingest")
        producer.init_transactions()
        with producer.transaction():
            producer.send("orders", [{"key": b"k1", "value": b"v1"}, {"key": b"k2", "value": b"v2"}], key="key")
        idempotent = broker.producer()
        idempotent.send("orders", [{"key": b"k3", "value": b"v3"}], partition=0)
        idempotent.flush()
        consumer = broker.consumer(group_id="copy")
        consumer.subscribe(["orders"])
        rows = consumer.poll(max_records=100)
        assert sorted(rows.column("value").to_pylist()) == [b"v1", b"v2", b"v3"]
        copier = broker.producer(transactional_id="copier")
        copier.init_transactions()
        with copier.transaction():
            copier.send("copies", [{"key": r["key"], "value": r["value"]} for r in rows.to_pylist()], key="key")
            copier.send_offsets_to_transaction({tp: consumer.position(tp) for tp in consumer.assignment()}, "copy")
        assert broker.describe_group("copy").partitions
        zombie = broker.producer(transactional_id="hung", transaction_timeout_ms=1)
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send("orders", [{"key": b"z", "value": b"z"}], partition=1)
        zombie.flush()
        import time

        time.sleep(0.05)
        assert [a.transactional_id for a in broker.abort_expired_transactions()] == ["hung"]
        broker.complete_prepared_transactions()
        broker.expire_transactional_ids()
        assert broker.describe_transaction("hung").state == "CompleteAbort"
        assert broker.end_offsets([TopicPartition("orders", 1)])  # the LSO moved on
        broker.delete_topic("copies")
    finally:
        broker.close()


@pytest.mark.parametrize("statement", [
    "DROP TABLE segments",
    "ALTER TABLE topics ADD COLUMN evil text",
    "CREATE TABLE evil (x int)",
    "TRUNCATE segments",
    "TRUNCATE txn_state_log",
    "UPDATE txn_state_log SET reason = 'rewritten'",
    "DELETE FROM txn_state_log",
    "DELETE FROM schema_migrations",
    "INSERT INTO schema_migrations (version, applied_ms) VALUES ('9999_evil', 0)",
    "CREATE ROLE evil",
    "GRANT txn_broker_owner TO CURRENT_USER",
])
def test_client_may_not(roles_db, statement):
    with pytest.raises(sa.exc.ProgrammingError) as info:
        raw(roles_db["urls"][CLIENT], statement)
    assert getattr(info.value.orig, "pgcode", None) == "42501", info.value


def test_monitor_reads_everything(roles_db):
    setup = txn_broker.connect(roles_db["urls"][CLIENT], roles_db["storage"])
    setup.create_topic("watched", partitions=1)
    p = setup.producer(transactional_id="watched-writer")
    p.init_transactions()
    with p.transaction():
        p.send("watched", [{"key": b"a", "value": b"b"}], partition=0)
    setup.commit_offsets("watchers", {TopicPartition("watched", 0): 1})
    setup.close()
    monitor = txn_broker.connect(roles_db["urls"][MONITOR], roles_db["storage"])
    try:
        assert "watched" in monitor.list_topics()
        assert monitor.describe_topic("watched").partitions[0].high_watermark == 1
        assert monitor.describe_group("watchers").partitions[0].committed_offset == 1
        assert {t.transactional_id for t in monitor.list_transactions()} >= {"watched-writer"}
        assert monitor.describe_transaction("watched-writer").state == "CompleteCommit"
        assert monitor.recent_transactions()
        assert monitor.find_hanging_transactions() == []
        assert monitor.end_offsets([TopicPartition("watched", 0)])
        reader = monitor.consumer()
        reader.assign([TopicPartition("watched", 0)])
        assert reader.poll().num_rows == 1
    finally:
        monitor.close()


def test_monitor_writes_nothing_and_cannot_abort(roles_db):
    setup = txn_broker.connect(roles_db["urls"][CLIENT], roles_db["storage"])
    setup.create_topic("open-txn", partitions=1)
    p = setup.producer(transactional_id="long-runner")
    p.init_transactions()
    p.begin_transaction()
    p.send("open-txn", [{"key": b"a", "value": b"b"}], partition=0)
    p.flush()
    monitor = txn_broker.connect(roles_db["urls"][MONITOR], roles_db["storage"])
    try:
        for action in (lambda: monitor.abort_transaction("long-runner"),
                       lambda: monitor.create_topic("nope"),
                       lambda: monitor.commit_offsets("g", {TopicPartition("open-txn", 0): 0}),
                       lambda: monitor.producer(transactional_id="sneaky").init_transactions()):
            with pytest.raises(DatabasePermissionError) as info:
                action()
            assert info.value.fatal and not info.value.retriable
        assert monitor.describe_transaction("long-runner").state == "Ongoing"  # untouched
        for statement in ("INSERT INTO counters (name, value) VALUES ('x', 1)",
                          "UPDATE transactional_ids SET state = 'CompleteAbort'",
                          "DELETE FROM segments",
                          "SELECT * FROM transactional_ids FOR UPDATE",
                          "TRUNCATE topics",
                          "CREATE TABLE evil (x int)"):
            with pytest.raises(sa.exc.ProgrammingError):
                raw(roles_db["urls"][MONITOR], statement)
    finally:
        monitor.close()
        p.abort_transaction()
        setup.close()


def test_migrations_as_the_client_are_refused(pg_server, roles_db):
    """A fresh database migrated by the client role: it may not create tables."""
    name = f"client_migrates_{uuid.uuid4().hex[:6]}"
    pg_server.admin(f'CREATE DATABASE "{name}" OWNER {OWNER}', f'GRANT CONNECT ON DATABASE "{name}" TO {CLIENT}')
    client_url = roles_db["urls"][CLIENT].rsplit("/", 1)[0] + f"/{name}"
    try:
        with pytest.raises(DatabasePermissionError):
            upgrade(client_url)
    finally:
        pg_server.drop_database(name)


def test_create_login_binds_the_password(pg_server):
    """A password full of quotes and SQL reaches PostgreSQL intact (the server quotes it),
    and appears in no error."""
    admin = Database(pg_server.url("postgres"))
    apply_roles(admin)  # the group roles; the module's fixture may not have run before this test
    user, secret = f"odd_pw_{uuid.uuid4().hex[:6]}", "s3cr3t-'; DROP ROLE test; --:x"
    try:
        create_login(admin, user, secret, MONITOR)
        create_login(admin, user, secret, MONITOR)  # idempotent: resets the password
        with pytest.raises(InvalidNameError) as info:
            create_login(admin, "Bad Name", secret, MONITOR)
        assert secret not in str(info.value)
        with pytest.raises(InvalidConfigError):
            create_login(admin, user, "", MONITOR)
    finally:
        admin.dispose()
    engine = sa.create_engine(url_as(pg_server, user, "", "postgres"),
                              connect_args={"password": secret})
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT current_user")).scalar() == user
    finally:
        engine.dispose()
