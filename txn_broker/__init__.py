"""Kafka-style transactional topics on PostgreSQL (or SQLite) and object storage.

Records are Arrow tables (or anything ``pyarrow.table`` accepts) matching the topic's
schema; ``key`` names the column whose value picks the partition. A topic created
without a schema has Kafka's record shape: ``key``, ``value`` (bytes) and ``headers``.

>>> import pyarrow as pa
>>> import txn_broker
>>> broker = txn_broker.connect()          # embedded default: ./.txn_broker
>>> schema = pa.schema([("order_id", pa.string()), ("amount", pa.float64())])
>>> _ = broker.create_topic("orders", partitions=4, schema=schema)
>>> producer = broker.producer(transactional_id="orders.ingest")
>>> producer.init_transactions()           # fences any older instance of this id
>>> with producer.transaction():           # commits on success, aborts on an exception
...     producer.send("orders", pa.table({"order_id": ["a1", "a2"], "amount": [9.5, 12.0]}),
...                   key="order_id")
>>> consumer = broker.consumer(isolation_level="read_committed")
>>> consumer.subscribe(["orders"])
>>> sorted(consumer.poll()["order_id"].to_pylist())
['a1', 'a2']

What is promised, and what each error means: ``docs/semantics.md``.
"""

from __future__ import annotations

from . import errors
from .broker import Broker, connect
from .config import Settings
from .log.partition import READ_COMMITTED, READ_UNCOMMITTED
from .models import TopicPartition

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "Broker", "Settings", "TopicPartition", "connect", "errors"]
__version__ = "0.1.0"
