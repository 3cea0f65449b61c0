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
from .broker import Broker, Progress, connect, upgrade_schema
from .compaction import CompactionReport
from .config import Settings, broker_home, resolve_database_url, resolve_storage_url
from .consumer import Consumer
from .coordinator import SweepAction
from .fsck import FsckReport
from .gc import GcReport
from .log.batches import key_partitions
from .log.field_ids import FIELD_ID_KEY, field_id, with_field_id
from .log.partition import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED
from .log.projection import DEFAULT_KEY, declared_default
from .log.types import AppendResult
from .models import (
    GroupDescription,
    GroupPartition,
    HangingTransaction,
    OffsetAndMetadata,
    PartitionInfo,
    SchemaUpgrade,
    StateChange,
    TopicDescription,
    TopicPartition,
    TopicSpec,
    TransactionDescription,
    TransactionSummary,
    TxnPartition,
)
from .names import validate_id, validate_topic_name
from .producer import Producer
from .record_files import BINARY_ENCODINGS, guess_format, read_records
from .record_files import FORMATS as RECORD_FORMATS
from .record_files import Source as RecordSource
from .record_files import open_source as open_records
from .redaction import mask_url, redact, strip_userinfo, url_secrets
from .states import (
    IDLE_STATES,
    OPEN_STATES,
    PREPARED_STATES,
    TxnState,
    is_hanging,
    is_open,
    open_age_ms,
    state_sets,
)
from .timestamps import to_timestamp_ms
from .topic_configs import COMPATIBILITY_MODES
from .topic_schemas import SchemaVersion, with_default

#: the public API (docs/api.md); every other module of txn_broker is internal
__all__ = [
    # connecting, and the schema
    "Broker", "Progress", "Settings", "broker_home", "connect", "resolve_database_url",
    "resolve_storage_url", "upgrade_schema",
    # clients
    "ISOLATION_LEVELS", "READ_COMMITTED", "READ_UNCOMMITTED", "Consumer", "Producer", "key_partitions",
    # records from files (JSON Lines, CSV, Parquet) into a topic's schema
    "BINARY_ENCODINGS", "RECORD_FORMATS", "RecordSource", "guess_format", "open_records", "read_records",
    # schema evolution (docs/semantics.md, "Schema evolution"): field ids and defaults
    "COMPATIBILITY_MODES", "DEFAULT_KEY", "FIELD_ID_KEY", "SchemaVersion", "declared_default", "field_id",
    "with_default", "with_field_id",
    # what the broker returns
    "AppendResult", "CompactionReport", "FsckReport", "GcReport", "GroupDescription", "GroupPartition",
    "HangingTransaction", "OffsetAndMetadata", "PartitionInfo", "SchemaUpgrade", "StateChange", "SweepAction",
    "TopicDescription", "TopicPartition", "TopicSpec", "TransactionDescription", "TransactionSummary", "TxnPartition",
    # transaction states
    "IDLE_STATES", "OPEN_STATES", "PREPARED_STATES", "TxnState", "is_hanging", "is_open", "open_age_ms",
    "state_sets",
    # names and secrets
    "mask_url", "redact", "strip_userinfo", "url_secrets", "validate_id", "validate_topic_name",
    # points in time (reprocessing from a date)
    "to_timestamp_ms",
    # errors (txn_broker.errors)
    "errors",
]
__version__ = "0.1.0"
