"""A Spark driver the driver-crash test runs as its own process and kills.

It runs one stage, ``crash_in`` -> ``crash_out`` (the ``n`` column doubled into ``twice``),
with ``txn_stage`` on a ``local[2]`` SparkSession, the broker taken from the
``TXN_BROKER_*`` environment. ``TXN_BROKER_FAULTS`` (``spark.before_register=pause:PATH``
...) stops it at the step under test; the test then kills the whole process tree.
"""

from __future__ import annotations

import os
import sys


def stage_function(spark, stage) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    df = stage.read()
    stage.write(df.select("n", (F.col("n") * 2).alias("twice")), topic="crash_out", key="n", segment_bytes=2048)


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import txn_broker
    from txn_broker.spark import txn_stage

    spark = (SparkSession.builder.master("local[2]").appName("crash-driver")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    with txn_broker.connect() as broker:
        with txn_stage(spark, broker, transactional_id=sys.argv[1], group_id="crash", inputs=["crash_in"]) as stage:
            stage_function(spark, stage)
    print("COMMITTED", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
