"""A command that only reads never creates a broker: on a missing SQLite database (a mistyped
--database-url, or the default ./.txn_broker not there) it names what it looked for and
exits 2, creating no directory and no file. A command that creates (`topics create`) on a
first run says on stderr, in one line, where the new broker lives; and every "nothing found"
answer names the database and storage it looked in. The CLI runs in-process (as the console
script runs it); the console script itself once, for the first repro."""

from __future__ import annotations

import json

import pytest
from _cli import cli_env, error_line, run

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """``cli(*args) -> (exit code, stdout, stderr)`` with TXN_BROKER_HOME=tmp_path/home."""
    from txn_broker.cli.main import main

    for name in ("TXN_BROKER_DATABASE_URL", "TXN_BROKER_STORAGE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TXN_BROKER_HOME", str(tmp_path / "home"))

    def call(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        printed = capsys.readouterr()
        return code, printed.out, printed.err

    return call


def test_a_read_only_command_on_a_missing_database_exits_2_and_creates_nothing(tmp_path, cli):
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    result = run(None, "--database-url", f"sqlite:///{missing}", "topics", "list", expect=2,
                 env=cli_env(None, TXN_BROKER_HOME=str(tmp_path / "home")))
    line = error_line(result)
    assert f"no broker database at {missing}" in line and "nothing was created" in line
    assert not (tmp_path / "no").exists()
    # the embedded default, for each read-only command
    for args in (["topics", "list"], ["--json", "groups", "list"], ["transactions", "list"], ["fsck"],
                 ["consume", "t", "--from-beginning"], ["topics", "describe", "t"],
                 ["produce", "t", "--file", "-", "--format", "jsonl"]):
        code, out, err = cli(*args)
        assert code == 2 and out == "", (args, out)
        assert str(tmp_path / "home" / "broker.db") in err and "TXN_BROKER_HOME" in err, (args, err)
    assert not (tmp_path / "home").exists()


def test_a_first_run_says_where_it_created_the_broker_and_empty_answers_say_where_they_looked(tmp_path, cli):
    home = tmp_path / "home"
    code, _out, err = cli("topics", "create", "t", "--partitions", "1")
    segments = (home / "segments").as_uri()
    assert code == 0
    assert err.splitlines() == [f"Created a new embedded broker in {home} (database broker.db, storage {segments})."]
    assert (home / "broker.db").exists()
    assert cli("topics", "create", "u", "--partitions", "1")[2] == ""  # only the first time
    where = f"in database sqlite:///{home / 'broker.db'}, storage {segments}."
    assert cli("groups", "list")[1].strip() == f"No consumer groups {where}"
    assert cli("transactions", "list")[1].strip() == f"No transactional ids {where}"
    assert cli("transactions", "find-hanging")[1].strip() == f"No hanging transactions {where}"
    assert cli("consume", "t", "--from-beginning", "--format", "table")[1].strip() == f"No records {where}"
    assert json.loads(cli("--json", "groups", "list")[1]) == {"groups": []}  # scripts: unchanged
