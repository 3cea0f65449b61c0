"""Stage ``clean_orders``: ``orders_raw`` -> ``orders_clean``, dropping dirty rows and
duplicates, in one transaction.

Input ``orders_raw`` (order_id, customer_id, country, amount decimal(12,2), currency, ts;
all nullable). A row is dirty, and dropped, when order_id, customer_id, amount or ts is
null, amount <= 0, the trimmed upper-cased country is not two letters A-Z, or the currency
is not a known code (a null currency is EUR). Duplicates (same order_id) within the batch
keep the earliest record (by ts, then topic, partition, offset), so the result is the same
however often Spark recomputes it. Duplicates across batches are not looked for: ingest
with a transactional id so retries do not create them.

Output ``orders_clean`` (same columns, none null, country and currency upper-case), keyed
by order_id.

    spark-submit spark_apps/clean_orders.py --transactional-id orders.clean --group-id clean
"""

from __future__ import annotations

from typing import Any

try:
    from spark_apps.pipeline import CURRENCIES, ensure_topics
except ImportError:  # run as a file: spark-submit, or loaded by path from $TXN_BROKER_SPARK_APPS
    from pipeline import CURRENCIES, ensure_topics  # type: ignore[no-redef]

INPUTS = ["orders_raw"]
OUTPUT = "orders_clean"


def clean(df: Any) -> Any:
    """The cleaning transform (Spark SQL only: no Python UDF, no per-row Python)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    country = F.upper(F.trim(F.col("country")))
    currency = F.coalesce(F.upper(F.trim(F.col("currency"))), F.lit("EUR"))
    valid = (
        F.col("order_id").isNotNull() & F.col("customer_id").isNotNull() & F.col("ts").isNotNull()
        & F.col("amount").isNotNull() & (F.col("amount") > 0)
        & country.rlike("^[A-Z]{2}$") & currency.isin(*CURRENCIES)
    )
    first = Window.partitionBy("order_id").orderBy("ts", "_topic", "_partition", "_offset")
    return (
        df.where(valid)
        .withColumn("_rank", F.row_number().over(first))
        .where(F.col("_rank") == 1)
        .select("order_id", "customer_id", country.alias("country"), "amount", currency.alias("currency"), "ts")
    )


def run(spark: Any, stage: Any, **_: Any) -> None:
    ensure_topics(stage.broker, ["orders_raw", OUTPUT])
    stage.write(clean(stage.read("orders_raw")), topic=OUTPUT, key="order_id")


if __name__ == "__main__":
    from txn_broker.spark import app_main as main

    main(run, inputs=INPUTS, description=__doc__)
