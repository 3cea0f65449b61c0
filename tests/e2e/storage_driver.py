"""A Spark driver for the bad set-up test: one stage writing ``spark.range(n)`` into
``unreachable_out`` on the cluster ``argv[1]``, the broker from the ``TXN_BROKER_*``
environment. Prints ``BROKER_ERROR <class> <handling> <message>`` and exits 3 when the
stage fails with a broker error, ``COMMITTED`` when it commits."""

from __future__ import annotations

import os
import sys


def main() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyarrow as pa
    from pyspark.sql import SparkSession

    import txn_broker
    from txn_broker.errors import TxnBrokerError
    from txn_broker.spark import txn_stage

    spark = (SparkSession.builder.master(sys.argv[1]).appName("unreachable-storage")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.task.maxFailures", "1").config("spark.cores.max", "1").getOrCreate())
    try:
        with txn_broker.connect() as broker:
            if "unreachable_out" not in broker.list_topics():
                broker.create_topic("unreachable_out", partitions=2, schema=pa.schema([("id", pa.int64())]))
            with txn_stage(spark, broker, transactional_id="bad.storage", group_id="bad.storage",
                           inputs=[]) as stage:
                stage.write(spark.range(20), topic="unreachable_out")
    except TxnBrokerError as error:
        print(f"BROKER_ERROR {type(error).__name__} {error.handling} {error}", flush=True)
        return 3
    finally:
        spark.stop()
    print("COMMITTED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
