"""Helpers shared by the Spark tests."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def consume_all(broker: Any, topic: str, isolation_level: str = "read_committed") -> pa.Table:
    """Every record of ``topic`` a fresh consumer reads at ``isolation_level``."""
    consumer = broker.consumer(isolation_level=isolation_level)
    consumer.subscribe([topic])
    parts = []
    while (batch := consumer.poll(max_records=100_000)).num_rows:
        parts.append(batch)
    consumer.close()
    if not parts:
        from txn_broker.log.segment_format import read_schema

        return read_schema(broker._topics.get(topic, refresh=True).schema).empty_table()
    return pa.concat_tables(parts)


def produce(broker: Any, topic: str, rows: list[dict[str, Any]], *, transactional_id: str = "test.producer",
            key: str | None = None, per_transaction: int | None = None, flush_every: int | None = None) -> None:
    """Write ``rows`` in committed transactions (``flush_every``: one segment per that many rows)."""
    producer = broker.producer(transactional_id=transactional_id)
    producer.init_transactions()
    step = per_transaction or len(rows) or 1
    for i in range(0, len(rows), step):
        with producer.transaction():
            chunk = rows[i:i + step]
            inner = flush_every or len(chunk) or 1
            for j in range(0, len(chunk), inner):
                producer.send(topic, chunk[j:j + inner], key=key)
                producer.flush()
    producer.close()


def stored_keys(broker: Any, topic: str | None = None) -> set[str]:
    """Object keys in storage (of ``topic``'s segments only, when given)."""
    prefix = "topics/" if topic is None else f"topics/{broker._topics.get(topic).topic_id}/"
    return {o.key for o in broker._store.list(prefix)}


def registered_keys(broker: Any, topic: str | None = None) -> set[str]:
    return {k for k in stored_keys(broker, topic) if broker.segment_registered(k)}
