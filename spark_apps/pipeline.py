"""The example pipeline's topics: their schemas, partition counts and keys, in one place.

| topic | key | partitions | columns |
| --- | --- | --- | --- |
| ``orders_raw`` | order_id | 4 | order_id, customer_id, country, amount decimal(12,2), currency, ts (nullable) |
| ``orders_clean`` | order_id | 4 | the same, none null; country upper-case ISO code, currency upper-case |
| ``revenue_daily`` | country | 2 | day date, country, currency, revenue decimal(18,2), orders bigint |
| ``transfers`` | account | 4 | transfer_id, account, amount bigint (cents, signed), currency, ts |
| ``ledger_checks`` | (none) | 1 | checked_at, transfers, legs, total, unbalanced, ok, offsets (JSON) |

Every ``transfers`` transfer is two records, a debit (negative) and a credit (positive) of
the same amount on accounts in different partitions, written in one transaction.

The stage applications import this module as ``pipeline`` (spark-submit, or a file loaded
by path: its directory is on ``sys.path``) or as ``spark_apps.pipeline``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

TS = pa.timestamp("ms", tz="UTC")
MONEY = pa.decimal128(12, 2)
CURRENCIES = ("EUR", "USD", "GBP", "CHF", "SEK")

ORDERS_RAW = pa.schema([
    ("order_id", pa.string()), ("customer_id", pa.string()), ("country", pa.string()),
    ("amount", MONEY), ("currency", pa.string()), ("ts", TS),
])
ORDERS_CLEAN = pa.schema([pa.field(f.name, f.type, nullable=False) for f in ORDERS_RAW])
REVENUE_DAILY = pa.schema([
    pa.field("day", pa.date32(), nullable=False), pa.field("country", pa.string(), nullable=False),
    pa.field("currency", pa.string(), nullable=False), pa.field("revenue", pa.decimal128(18, 2), nullable=False),
    pa.field("orders", pa.int64(), nullable=False),
])
TRANSFERS = pa.schema([
    pa.field("transfer_id", pa.string(), nullable=False), pa.field("account", pa.string(), nullable=False),
    pa.field("amount", pa.int64(), nullable=False), pa.field("currency", pa.string(), nullable=False),
    pa.field("ts", TS, nullable=False),
])
LEDGER_CHECKS = pa.schema([
    pa.field("checked_at", TS, nullable=False), pa.field("transfers", pa.int64(), nullable=False),
    pa.field("legs", pa.int64(), nullable=False), pa.field("total", pa.int64(), nullable=False),
    pa.field("unbalanced", pa.int64(), nullable=False), pa.field("ok", pa.bool_(), nullable=False),
    pa.field("offsets", pa.string(), nullable=False),
])

#: orders_raw records accepted by the event-driven DAG ``orders_events``, each with where it
#: came from and the asset events of the run that processed it
ORDERS_ACCEPTED = pa.schema([*ORDERS_RAW, ("source_partition", pa.int32()), ("source_offset", pa.int64()),
                             ("event_ids", pa.string())])
#: topic -> (schema, partitions, key column)
TOPICS: dict[str, tuple[pa.Schema, int, str | None]] = {
    "orders_raw": (ORDERS_RAW, 4, "order_id"),
    "orders_clean": (ORDERS_CLEAN, 4, "order_id"),
    "revenue_daily": (REVENUE_DAILY, 2, "country"),
    "transfers": (TRANSFERS, 4, "account"),
    "ledger_checks": (LEDGER_CHECKS, 1, None),
    "orders_accepted": (ORDERS_ACCEPTED, 4, "order_id"),
}


def ensure_topics(broker: Any, names: list[str] | tuple[str, ...]) -> None:
    """Create the pipeline topics among ``names`` that do not exist yet (idempotent, safe
    when several stages start at once). An existing topic with another schema or partition
    count is an error (``Broker.ensure_topics``)."""
    broker.ensure_topics({name: (TOPICS[name][1], TOPICS[name][0]) for name in names})
