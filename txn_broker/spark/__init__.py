"""Spark (PySpark 4) for transactional topics: the ``txn_topic`` data source and
``txn_stage``, which runs a whole stage in one transaction.

    import txn_broker.spark
    txn_broker.spark.register(spark)
    df = (spark.read.format("txn_topic").option("topic", "orders")
          .option("isolation.level", "read_committed").load())
    df = txn_broker.spark.read(spark, broker, topic="orders")   # published part from its Iceberg table
    df.write.format("txn_topic").option("topic", "clean_orders").option("key.column", "order_id") \\
        .mode("append").save()

The broker's location comes from the options ``database.url``, ``storage.url`` and
``s3.endpoint.url`` (``connection_options(broker)`` builds them), else from the
``TXN_BROKER_*`` environment. See docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .app import main as app_main
from .app import spark_session
from .native_read import read
from .offsets import OffsetRange, OffsetRanges, planned_offsets, resolve_offsets
from .options import connection_options, transaction_options
from .registry import register
from .stage import Stage, StageSummary, txn_stage

if TYPE_CHECKING:
    from ..broker import Broker
    from ..producer import Producer

__all__ = [
    "OffsetRange", "OffsetRanges", "Stage", "StageSummary", "app_main", "connection_options", "planned_offsets",
    "read", "register", "resolve_offsets", "spark_session", "transaction_options", "txn_stage", "write_options",
]


def write_options(broker: Broker, producer: Producer | None = None) -> dict[str, str]:
    """Options for ``df.write.format("txn_topic")`` that write through ``broker``, into
    ``producer``'s open transaction when given (it must be in a transaction: the handle
    starts the transaction at the coordinator). Without a producer the write is idempotent
    and visible when the Spark job ends. Contains the database password: never print it."""
    out = connection_options(broker)
    if producer is not None:
        out.update(transaction_options(producer.transaction_handle()))
    return out
