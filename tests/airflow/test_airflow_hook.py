"""TxnBrokerHook and the ``txn_broker`` connection type: connections from extras, the
fallback when nothing is configured, secrets kept out of messages, and discovery of the
connection type and the plugin by Airflow itself."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

SECRET = "S3cr3t-pa55-" + uuid.uuid4().hex[:8]


def set_connection(monkeypatch, conn_id: str, **extra: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                       json.dumps({"conn_type": "txn_broker", "extra": extra}))


def test_hook_uses_connection_extras(airflow_env, backend, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    extras = {"database_url": backend.database_url, "storage_url": backend.storage_url}
    if backend.name == "postgres":
        monkeypatch.delenv("TXN_BROKER_S3_ENDPOINT_URL", raising=False)
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            monkeypatch.delenv(key, raising=False)
        extras.update(endpoint_url=backend.env["TXN_BROKER_S3_ENDPOINT_URL"], aws_access_key_id="testing",
                      aws_secret_access_key="testing", region_name="us-east-1")
    set_connection(monkeypatch, "tb_test", **extras, settings='{"max_transaction_timeout_ms": 120000}')
    hook = TxnBrokerHook("tb_test")
    try:
        broker = hook.get_conn()
        assert hook.get_conn() is broker  # cached
        assert broker.settings.max_transaction_timeout_ms == 120_000
        broker.create_topic("hooked", partitions=1)
        # a topic changes through the hook: recorded as this connection's doing
        import pyarrow as pa

        altered = hook.alter_topic("hooked", partitions=2, schema=pa.schema(
            [("key", pa.binary()), ("value", pa.binary()), ("headers", pa.map_(pa.string(), pa.binary())),
             ("source", pa.string())]))
        assert (len(altered.partitions), altered.schema_version) == (2, 2)
        assert broker.topic_alterations("hooked")[0]["altered_by"] == "airflow:tb_test"
        ok, message = hook.test_connection()
        assert ok, message
        assert "1 topic(s)" in message and "connection 'tb_test'" in message
    finally:
        hook.close()
    with backend.connect() as direct:  # the same broker as the backend's
        assert "hooked" in direct.list_topics()


def test_two_connections_keep_their_own_storage_settings_in_one_process(airflow_env, s3_server, tmp_path,
                                                                         monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two connections with different S3 endpoints and credentials, used interleaved from
    one process (the triggerer, the API server): each writes to and reads from its own store,
    nothing is written to os.environ, and a connection that leaves the credentials empty
    gets this process's own (boto3's chain), never the other connection's."""
    import os

    from _servers import S3Server
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    for key in ("TXN_BROKER_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    other = S3Server()
    hooks: dict[str, TxnBrokerHook] = {}
    try:
        servers = {"a": s3_server, "b": other, "c": other}
        secrets = {name: f"{SECRET}-{name}" for name in ("a", "b")}
        for name, server in servers.items():
            extras = {"database_url": f"sqlite:///{tmp_path}/{name}.db",
                      "storage_url": f"s3://{server.new_bucket()}/segments", "endpoint_url": server.endpoint_url}
            if name in secrets:
                extras.update(aws_access_key_id=f"key-{name}", aws_secret_access_key=secrets[name])
            set_connection(monkeypatch, f"tb_{name}", **extras)
        environ_before = dict(os.environ)
        brokers = {}
        for name in ("a", "b"):
            hooks[name] = TxnBrokerHook(f"tb_{name}")
            brokers[name] = hooks[name].get_conn()
            brokers[name].create_topic("t", partitions=1)
        for i in range(2):  # interleaved
            for name, broker in brokers.items():
                producer = broker.producer()
                producer.send("t", [{"key": f"{name}{i}".encode(), "value": b"v"}], partition=0)
                producer.close()
        for name, broker in brokers.items():
            consumer = broker.consumer()
            consumer.assign([("t", 0)])
            assert consumer.poll(max_records=10).column("key").to_pylist() == [f"{name}0".encode(), f"{name}1".encode()]
            consumer.close()
            assert broker._store.endpoint_url == servers[name].endpoint_url  # type: ignore[attr-defined]
            assert broker._store._client._request_signer._credentials.access_key == f"key-{name}"  # type: ignore[attr-defined]
        # a connection with no credentials: this process's own, not the last connection's
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key-of-the-process")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-of-the-process")
        environ_before = dict(os.environ)
        hooks["c"] = TxnBrokerHook("tb_c")
        bare = hooks["c"].get_conn()
        bare.create_topic("t", partitions=1)
        assert bare._store._client._request_signer._credentials.access_key == "key-of-the-process"  # type: ignore[attr-defined]
        assert dict(os.environ) == environ_before
        leaked = [key for key, value in os.environ.items() for secret in secrets.values()
                  if secret in value and not key.startswith("AIRFLOW_CONN_")]  # where the test defined them
        assert leaked == []
        for name in ("a", "b"):
            ok, message = hooks[name].test_connection()
            assert ok and secrets[name] not in message, message
    finally:
        for hook in hooks.values():
            hook.close()
        other.close()


def test_default_connection_falls_back_to_embedded(airflow_env, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    for key in ("TXN_BROKER_DATABASE_URL", "TXN_BROKER_STORAGE_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TXN_BROKER_HOME", str(tmp_path / "embedded"))
    hook = TxnBrokerHook()
    try:
        assert "embedded default" in hook.broker_config().describe()
        hook.get_conn().create_topic("local", partitions=1)
        assert (tmp_path / "embedded" / "broker.db").exists()
    finally:
        hook.close()


def test_named_connection_must_exist(airflow_env) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk.exceptions import AirflowNotFoundException
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    with pytest.raises(AirflowNotFoundException):
        TxnBrokerHook("no_such_connection").get_conn()


def test_test_connection_never_shows_secrets(airflow_env, pg_server, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    role = f"r_{uuid.uuid4().hex[:8]}"
    pg_server.admin(f"CREATE ROLE {role} LOGIN PASSWORD '{SECRET}'")
    base = f"postgresql+psycopg2://{role}:{{pw}}@{pg_server.host}:{pg_server.port}/postgres"
    # right password, but the database holds no broker schema: a clear error, no secret
    set_connection(monkeypatch, "tb_secret", database_url=base.format(pw=SECRET),
                   storage_url="s3://bucket/prefix", aws_secret_access_key=SECRET)
    ok, message = TxnBrokerHook("tb_secret").test_connection()
    assert not ok and SECRET not in message
    assert "SchemaVersionError" in message or "Error" in message
    # wrong password: the server's refusal is reported, the attempted password is not
    wrong = SECRET + "-wrong"
    set_connection(monkeypatch, "tb_wrong", database_url=base.format(pw=wrong))
    ok, message = TxnBrokerHook("tb_wrong").test_connection()
    assert not ok and wrong not in message and SECRET not in message
    assert "***" in message or "password" in message.lower()


def _cli_json(args: list[str], env: dict[str, str]) -> object:
    proc = subprocess.run([sys.executable, "-m", "airflow", *args, "-o", "json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    start = min(i for i in (text.find("["), text.find("{")) if i >= 0)  # warnings may come first
    return json.loads(text[start:])


def test_airflow_discovers_connection_type_and_plugin(airflow_site) -> None:  # type: ignore[no-untyped-def]
    env = airflow_site.environment()
    hooks = _cli_json(["providers", "hooks"], env)
    ours = [h for h in hooks if h["connection_type"] == "txn_broker"]  # type: ignore[union-attr]
    assert ours and ours[0]["class"] == "txn_broker_airflow.hooks.txn_broker.TxnBrokerHook"
    assert ours[0]["package_name"] == "txn-broker"
    plugins = _cli_json(["plugins"], env)
    mine = [p for p in plugins if p["name"] == "txn_broker_airflow"]  # type: ignore[union-attr]
    assert mine and mine[0]["listeners"] == ["txn_broker_airflow.listeners.TxnBrokerFailureListener"]
    # the connection form of the UI: declared fields, hidden standard fields
    code = ("import json; from airflow.providers_manager import ProvidersManager as P; p = P(); "
            "print(json.dumps({'widgets': sorted(k for k in p.connection_form_widgets if 'txn_broker' in k),"
            " 'behaviour': p.field_behaviours.get('txn_broker')}))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    form = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "extra__txn_broker__database_url" in form["widgets"]
    assert "extra__txn_broker__aws_secret_access_key" in form["widgets"]
    assert set(form["behaviour"]["hidden_fields"]) == {"host", "schema", "login", "password", "port"}


def test_owner_role_connection_gets_one_warning(airflow_env, pg_server, tmp_path, monkeypatch, capfd) -> None:  # type: ignore[no-untyped-def]
    """A connection whose database URL logs in as the schema's owner (or a superuser) works,
    but the hook warns once per process, naming the login and role and never the password;
    a login of the client role gets no warning. (The hook logs through Airflow's structlog,
    which writes to the process's output.)"""
    from txn_broker_airflow.hooks import txn_broker as hook_module
    from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

    from txn_broker.database import Database
    from txn_broker.migrations import upgrade
    from txn_broker.roles import CLIENT, OWNER, apply_roles, create_login

    suffix = uuid.uuid4().hex[:8]
    admin = Database(pg_server.url("postgres"))
    apply_roles(admin)
    logins = {}
    for role in (OWNER, CLIENT):
        user, password = f"{role.split('_')[-1]}_{suffix}", f"{SECRET}-{role}"
        create_login(admin, user, password, role)
        logins[role] = (user, password)
    admin.dispose()
    name = f"hookroles_{suffix}"
    pg_server.admin(f'CREATE DATABASE "{name}" OWNER {OWNER}',
                    f'ALTER ROLE "{logins[OWNER][0]}" IN DATABASE "{name}" SET role = {OWNER}')
    urls = {role: f"postgresql+psycopg2://{user}:{password}@{pg_server.host}:{pg_server.port}/{name}"
            for role, (user, password) in logins.items()}
    upgrade(urls[OWNER])  # migrations as the owner; they grant the client role its privileges
    storage = (tmp_path / "segments").as_uri()
    monkeypatch.setattr(hook_module, "_ROLE_CHECKED", set())
    output: list[str] = []

    def connect(conn_id: str, url: str) -> list[str]:
        set_connection(monkeypatch, conn_id, database_url=url, storage_url=storage)
        capfd.readouterr()
        hook = TxnBrokerHook(conn_id)
        try:
            hook.get_conn().list_topics()
        finally:
            hook.close()
        captured = capfd.readouterr()
        output.append(captured.out + captured.err)
        return [line for line in (captured.out + captured.err).splitlines()
                if "warning" in line and "least-privilege" in line]

    try:
        warned = connect("tb_owner", urls[OWNER])
        assert len(warned) == 1, warned
        assert f"login {logins[OWNER][0]!r}" in warned[0] and f"role {OWNER!r}" in warned[0]
        assert "connection 'tb_owner'" in warned[0] and CLIENT in warned[0]
        assert "txn_broker" in output[0]  # the capture sees the hook's log
        assert logins[OWNER][1] not in output[0] and SECRET not in output[0]
        assert connect("tb_owner", urls[OWNER]) == []  # once per process
        assert connect("tb_client", urls[CLIENT]) == []  # the right role: silent
        superuser = connect("tb_admin", pg_server.url(name))
        assert len(superuser) == 1 and "a superuser" in superuser[0]
        assert not any(SECRET in text for text in output)
    finally:
        pg_server.drop_database(name)


def test_plugins_folder_file_defers_to_the_installed_entry_point(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """plugins/txn_broker_airflow_plugin.py, loaded the way Airflow's plugins manager loads
    plugin files: it exposes the plugin class only when no installed distribution registers
    it through the airflow.plugins entry point (this checkout is installed, so it does)."""
    import importlib.machinery
    import importlib.util
    from pathlib import Path

    from txn_broker_airflow import plugin

    def plugin_classes() -> list[str]:
        path = Path(__file__).resolve().parents[2] / "plugins" / "txn_broker_airflow_plugin.py"
        loader = importlib.machinery.SourceFileLoader(f"plugin_file_{uuid.uuid4().hex}", str(path))
        spec = importlib.util.spec_from_loader(loader.name, loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return [name for name, value in vars(module).items()
                if isinstance(value, type) and issubclass(value, plugin.AirflowPlugin)]

    assert plugin.registered_by_entry_point()
    assert plugin_classes() == []  # the entry point registers it
    monkeypatch.setattr(plugin, "entry_points", lambda group: [])  # a checkout that is not installed
    assert not plugin.registered_by_entry_point()
    assert plugin_classes() == ["TxnBrokerAirflowPlugin"]
