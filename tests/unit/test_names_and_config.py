from __future__ import annotations

import pytest

from txn_broker.config import Settings, resolve_database_url, resolve_storage_url
from txn_broker.database import mask_url
from txn_broker.errors import InvalidConfigError, InvalidNameError, InvalidTopicNameError
from txn_broker.names import validate_id, validate_topic_name


@pytest.mark.parametrize("name", ["a", "orders.raw", "A_b-9", "x" * 249])
def test_valid_topic_names(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "x" * 250, "a b", "a/b", "x'; DROP TABLE topics;--", "ü", None, 5]
)
def test_invalid_topic_names(name):
    with pytest.raises(InvalidTopicNameError):
        validate_topic_name(name)


@pytest.mark.parametrize("value", ["", "a\x00b", "x" * 250, None])
def test_invalid_ids(value):
    with pytest.raises(InvalidNameError):
        validate_id("group id", value)


def test_unknown_or_bad_settings_are_refused():
    with pytest.raises(InvalidConfigError, match="unknown"):
        Settings.from_kwargs({"max_transaction_timeout": 5})
    with pytest.raises(InvalidConfigError):
        Settings.from_kwargs({"max_transaction_timeout_ms": -1})
    assert Settings.from_kwargs({"max_transaction_timeout_ms": 5}).max_transaction_timeout_ms == 5


def test_locations_resolve_argument_then_env_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("TXN_BROKER_DATABASE_URL", raising=False)
    monkeypatch.delenv("TXN_BROKER_STORAGE_URL", raising=False)
    monkeypatch.setenv("TXN_BROKER_HOME", str(tmp_path))
    assert resolve_database_url(None) == (f"sqlite:///{tmp_path}/broker.db", True)
    assert resolve_storage_url(None) == (tmp_path / "segments").as_uri()
    monkeypatch.setenv("TXN_BROKER_DATABASE_URL", "postgresql://u@h/db")
    assert resolve_database_url(None) == ("postgresql://u@h/db", False)
    assert resolve_database_url("sqlite:///x.db") == ("sqlite:///x.db", False)


def test_passwords_are_masked():
    masked = mask_url("postgresql+psycopg2://user:s3cret@db:5432/broker")
    assert "s3cret" not in masked and "user" in masked
