"""Every credential form through every output mode: a database password as user-info, as a
``password`` query parameter (alone or after ``user=``) and as a driver's credential
parameter (``sslpassword``), on a command that fails to connect, printed plain, with
``--json`` and with ``--debug``; the same URLs through the Python API's exceptions, their
repr and the library's logs, and a working broker's repr. A storage URL with user-info is
refused at once (exit 2, no retries), saying where credentials go."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
import sqlalchemy as sa
from _cli import cli_env, run
from _servers import free_port

import txn_broker
from txn_broker.errors import CredentialsInUrlError, TxnBrokerError

pytestmark = pytest.mark.integration
SECRET = "Sup3r-Secret-Pw"


def _forms(host: str) -> list[str]:
    return [f"postgresql+psycopg2://alice:{SECRET}@{host}/broker",
            f"postgresql+psycopg2://{host}/broker?password={SECRET}",
            f"postgresql+psycopg2://{host}/broker?user=alice&password={SECRET}",
            f"postgresql+psycopg2://alice@{host}/broker?sslmode=prefer&sslpassword={SECRET}"]


def _main(capsys, *args: str) -> tuple[int, str]:
    """``txn-broker ARGS`` in this process (as the console script runs it): exit code, and
    everything printed."""
    from txn_broker.cli.main import main

    code = main(list(args))
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def test_every_database_credential_form_in_every_output_mode(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TXN_BROKER_STORAGE_URL", (tmp_path / "s").as_uri())
    monkeypatch.delenv("TXN_BROKER_DATABASE_URL", raising=False)
    for url in _forms(f"127.0.0.1:{free_port()}"):
        for mode in ([], ["--json"], ["--debug"]):
            code, printed = _main(capsys, *mode, "--database-url", url, "topics", "list")
            assert code == 1 and SECRET not in printed, (url, mode)
            assert "***" in printed and "Connection refused" in printed, (url, mode, printed)
            assert ("Traceback" in printed) == (mode == ["--debug"])
    # from the environment too, through the real console script
    env = cli_env(None, TXN_BROKER_STORAGE_URL=(tmp_path / "s").as_uri(),
                  TXN_BROKER_DATABASE_URL=_forms("127.0.0.1:9")[2])
    result = run(None, "--debug", "fsck", expect=1, env=env)
    assert "Traceback" in result.err and SECRET not in result.out + result.err


def test_every_database_credential_form_through_the_api_and_its_logs(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="txn_broker")
    for url in _forms(f"127.0.0.1:{free_port()}"):
        with pytest.raises(TxnBrokerError) as caught:
            txn_broker.connect(url, (tmp_path / "s").as_uri(), retry_budget_ms=300)
        for text in (str(caught.value), repr(caught.value), caplog.text):
            assert SECRET not in text, url
        assert "***" in str(caught.value)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_working_broker_never_shows_a_query_password(backend, pg_server):
    password = "pw" + uuid.uuid4().hex
    role = f"r_{uuid.uuid4().hex[:8]}"
    pg_server.admin(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
    parsed = sa.make_url(backend.database_url)
    url = parsed.set(username=role, password=None).update_query_dict({"password": password, "application_name": "r"})
    with txn_broker.connect(url.render_as_string(hide_password=False), backend.storage_url) as broker:
        for text in (repr(broker), broker.database_location, broker.storage_location):
            assert password not in text
        assert "password=***" in broker.database_location


def test_a_storage_url_with_credentials_is_refused_at_once(tmp_path):
    url = f"s3://AKIAEXAMPLE:{SECRET}@bucket/prefix"
    started = time.monotonic()
    with pytest.raises(CredentialsInUrlError) as caught:
        txn_broker.connect(f"sqlite:///{tmp_path}/b.db", url)
    assert time.monotonic() - started < 5  # refused before any request: no retries
    assert SECRET not in str(caught.value) + repr(caught.value)
    assert "storage_options" in str(caught.value)
    assert not (tmp_path / "b.db").exists()  # nothing was created either
    env = cli_env(None, TXN_BROKER_DATABASE_URL=f"sqlite:///{tmp_path}/b.db")
    for mode in ([], ["--json"], ["--debug"]):
        result = run(None, *mode, "--storage-url", url, "topics", "list", expect=2, env=env)
        assert SECRET not in result.out + result.err, mode
        assert "has credentials in it" in result.err and "storage options" in result.err
