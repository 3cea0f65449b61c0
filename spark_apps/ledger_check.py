"""Stage ``ledger_check``: verify that money is conserved in the ``transfers`` read
read_committed, and record the check in ``ledger_checks``, in one transaction.

Every transfer is a debit and a credit of the same amount, written in one transaction on
two partitions. A read_committed batch (whose end the stage fixes atomically: no
committed transaction is cut in two) must therefore hold, for every transfer_id, exactly
two legs summing to 0, and the batch must sum to 0. A transfer that breaks this (one leg
of an aborted transaction, a lost or duplicated leg) is an imbalance: the stage raises
``LedgerImbalanceError``, so its transaction aborts and the group's offsets do not move
(every rerun checks the same records again until someone looks). ``fail_on_imbalance=false``
records the failed check in ``ledger_checks`` instead.

Output ``ledger_checks`` (checked_at, transfers, legs, total, unbalanced, ok, offsets JSON).

    spark-submit spark_apps/ledger_check.py --transactional-id bank.ledger_check --group-id ledger
"""

from __future__ import annotations

import json
from typing import Any

try:
    from spark_apps.pipeline import LEDGER_CHECKS, ensure_topics
except ImportError:  # run as a file: spark-submit, or loaded by path from $TXN_BROKER_SPARK_APPS
    from pipeline import LEDGER_CHECKS, ensure_topics  # type: ignore[no-redef]

INPUTS = ["transfers"]
OUTPUT = "ledger_checks"


class LedgerImbalanceError(RuntimeError):
    """Money was created or destroyed in the committed transfers."""


def check(df: Any) -> dict[str, int]:
    """Per-transfer and total balances of ``df`` (one Spark job, aggregated in Spark)."""
    from pyspark.sql import functions as F

    per_transfer = df.groupBy("transfer_id").agg(F.count(F.lit(1)).alias("legs"), F.sum("amount").alias("net"))
    row = per_transfer.agg(
        F.count(F.lit(1)).alias("transfers"),
        F.coalesce(F.sum("legs"), F.lit(0)).alias("legs"),
        F.coalesce(F.sum("net"), F.lit(0)).alias("total"),
        F.coalesce(F.sum(((F.col("legs") != 2) | (F.col("net") != 0)).cast("long")), F.lit(0)).alias("unbalanced"),
    ).first()
    return {k: int(row[k]) for k in ("transfers", "legs", "total", "unbalanced")}


def run(spark: Any, stage: Any, fail_on_imbalance: bool = True, **_: Any) -> None:
    import datetime

    import pyarrow as pa

    ensure_topics(stage.broker, ["transfers", OUTPUT])
    result = check(stage.read("transfers"))
    ok = result["total"] == 0 and result["unbalanced"] == 0
    if not ok and fail_on_imbalance:
        raise LedgerImbalanceError(
            f"money is not conserved: {result['unbalanced']} unbalanced transfer(s), total {result['total']} "
            f"over {result['transfers']} transfer(s)"
        )
    offsets = {f"{r.topic}-{r.partition}": [r.start, r.end] for r in stage.offsets.only(INPUTS)}
    row = {"checked_at": datetime.datetime.now(datetime.UTC), **result, "ok": ok,
           "offsets": json.dumps(offsets, sort_keys=True)}
    table = pa.Table.from_pylist([row], schema=LEDGER_CHECKS)
    stage.write(spark.createDataFrame(table), topic=OUTPUT)


if __name__ == "__main__":
    from txn_broker.spark import app_main as main

    main(run, inputs=INPUTS, description=__doc__)
