"""`txn-broker serve` in its own process, in front of the test's broker (both backends),
for Kafka clients no one here wrote (confluent-kafka, aiokafka)."""

from __future__ import annotations

import pytest
from _kafka_listener import Listener, wait_for

__all__ = ["Listener", "wait_for"]


@pytest.fixture
def kafka(backend, tmp_path):
    """The listener in front of the backend's broker."""
    listener = Listener(backend.env, tmp_path / "serve.log")
    yield listener
    listener.stop()
