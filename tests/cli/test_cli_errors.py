"""Exit codes, error lines and secrets: what every command shares."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _cli import cli_env, error_line, run
from _servers import free_port

pytestmark = pytest.mark.integration
PASSWORD = "Sup3r-Secret-Pw"


def test_unreachable_database_never_shows_its_password(tmp_path):
    url = f"postgresql+psycopg2://alice:{PASSWORD}@127.0.0.1:{free_port()}/broker"
    env = cli_env(None, TXN_BROKER_STORAGE_URL=(tmp_path / "s").as_uri())
    for args in (["--database-url", url, "topics", "list"], ["db", "upgrade", "--database-url", url],
                 ["--json", "--database-url", url, "gc"]):
        result = run(None, *args, expect=1, env=env)
        line = error_line(result)
        assert PASSWORD not in result.out + result.err
        assert "alice:***@127.0.0.1" in line and "Connection refused" in line
    # from the environment, and with --debug's traceback
    result = run(None, "--debug", "fsck", expect=1, env={**env, "TXN_BROKER_DATABASE_URL": url})
    assert "Traceback" in result.err and PASSWORD not in result.out + result.err
    assert result.err.splitlines()[-1].startswith("error: database postgresql+psycopg2://alice:***@")
    # a URL too broken to parse is hidden whole
    broken = f"postgresql+psycopg2//alice:{PASSWORD}@host/db"
    result = run(None, "--database-url", broken, "topics", "list", expect=2, env=env)
    assert PASSWORD not in result.out + result.err and "invalid database URL" in error_line(result)


def test_usage_errors_exit_2(tmp_path):
    """Checked before any database is opened, so one backend is enough."""
    env = cli_env(None, TXN_BROKER_DATABASE_URL=f"sqlite:///{tmp_path}/b.db",
                  TXN_BROKER_STORAGE_URL=(tmp_path / "s").as_uri())
    assert run(None, "--help", env=env).out.startswith("usage: txn-broker")
    for args in ([], ["frobnicate"], ["consume"], ["consume", "t", "--isolation-level", "dirty"],
                 ["consume", "t", "--max-records", "0"], ["topics", "create", "u"],
                 ["topics", "create", "u", "--partitions", "1", "--config", "ms"],
                 ["topics", "create", "u", "--partitions", "1", "--schema", "a:int64", "--schema-file", "f"],
                 ["groups", "reset-offsets", "g", "--topic", "t"], ["transactions", "list", "--state", "Bogus"]):
        result = run(None, *args, expect=2, env=env)
        assert result.err.startswith("usage: txn-broker") and result.out == "", args
    # a usage error found after parsing is one line too
    assert "--commit needs --group" in error_line(run(None, "consume", "t", "--commit", expect=2, env=env))


def test_error_lines_and_debug(backend):
    # errors: one line, no traceback; --debug adds it
    assert error_line(run(backend, "consume", "nope", expect=2)) == "error: unknown topic 'nope'"
    debug = run(backend, "--debug", "topics", "describe", "nope", expect=2)
    assert "Traceback" in debug.err and "UnknownTopicOrPartitionError" in debug.err
    # global options work after the command too; the module entry point is the same program
    assert run(backend, "topics", "list", "--json").json() == {"topics": []}
    module = subprocess.run([sys.executable, "-m", "txn_broker.cli", "--json", "groups", "list"],
                            env=cli_env(backend), capture_output=True, text=True, timeout=300)
    assert module.returncode == 0 and module.stdout.strip().startswith("{") and '"groups": []' in module.stdout
