"""Kafka-style transactional topics on PostgreSQL (or SQLite) and object storage.

    import txn_broker
    broker = txn_broker.connect()            # embedded default: ./.txn_broker
    broker.create_topic("orders", partitions=4)
    producer = broker.producer(transactional_id="orders.ingest")
    producer.init_transactions()
    with producer.transaction():
        producer.send("orders", [{"key": b"1", "value": b"..."}])
"""

from __future__ import annotations

from . import errors
from .broker import Broker, connect
from .config import Settings
from .fetch import READ_COMMITTED, READ_UNCOMMITTED
from .models import TopicPartition

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "Broker", "Settings", "TopicPartition", "connect", "errors"]
__version__ = "0.1.0"
