"""Registering the ``txn_topic`` data source with a SparkSession (public as
``txn_broker.spark.register``)."""

from __future__ import annotations

import weakref
from typing import Any

_registered: weakref.WeakSet[Any] = weakref.WeakSet()


def register(spark: Any) -> None:
    """Register the ``txn_topic`` data source with ``spark`` (idempotent). The package must
    be installed where Spark runs Python (driver and executors)."""
    from .source import TxnTopicDataSource

    if spark in _registered:
        return
    spark.dataSource.register(TxnTopicDataSource)
    _registered.add(spark)
