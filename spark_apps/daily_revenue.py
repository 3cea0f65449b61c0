"""Stage ``daily_revenue``: ``orders_clean`` -> ``revenue_daily``, in one transaction.

Input ``orders_clean``. Output ``revenue_daily`` (day date, country, currency, revenue
decimal(18,2), orders bigint), keyed by country: one row per (UTC day, country, currency)
of the orders in this batch. A later batch with more orders of the same day adds another
row: the day's revenue is the sum of its rows (the topic is an append-only log of partial
aggregates, each counted exactly once).

    spark-submit spark_apps/daily_revenue.py --transactional-id orders.revenue --group-id revenue
"""

from __future__ import annotations

from typing import Any

try:
    from spark_apps.pipeline import ensure_topics
except ImportError:  # run as a file: spark-submit, or loaded by path from $TXN_BROKER_SPARK_APPS
    from pipeline import ensure_topics  # type: ignore[no-redef]

INPUTS = ["orders_clean"]
OUTPUT = "revenue_daily"
MICROS_PER_DAY = 86_400_000_000


def daily_revenue(df: Any) -> Any:
    from pyspark.sql import functions as F

    # the UTC day, whatever the session time zone
    day = F.date_from_unix_date(F.floor(F.unix_micros(F.col("ts")) / MICROS_PER_DAY).cast("int"))
    return (
        df.groupBy(day.alias("day"), F.col("country"), F.col("currency"))
        .agg(F.sum("amount").cast("decimal(18,2)").alias("revenue"), F.count(F.lit(1)).alias("orders"))
        .select("day", "country", "currency", "revenue", "orders")
    )


def run(spark: Any, stage: Any, **_: Any) -> None:
    ensure_topics(stage.broker, ["orders_clean", OUTPUT])
    stage.write(daily_revenue(stage.read("orders_clean")), topic=OUTPUT, key="country")


if __name__ == "__main__":
    from txn_broker.spark import app_main as main

    main(run, inputs=INPUTS, description=__doc__)
