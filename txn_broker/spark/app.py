"""The command line every ``spark_apps/`` stage shares, so the same file runs in-process
(``run(spark, stage, **kwargs)`` inside ``txn_stage``) and as a Spark application:

    spark-submit spark_apps/clean_orders.py --transactional-id orders.clean --group-id clean
    python spark_apps/clean_orders.py --transactional-id orders.clean --group-id clean --json

The broker comes from the ``TXN_BROKER_*`` environment (``txn_broker.connect()``). The Spark
master is spark-submit's, else ``--master``, else ``$TXN_BROKER_SPARK_MASTER``, else
``local[2]``. The stage's summary is printed as a table, or as JSON with ``--json``; the
exit status is 0 when the transaction committed, 1 when the stage failed (and aborted),
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

DEFAULT_MASTER = "local[2]"
SPARK_MASTER_ENV = "TXN_BROKER_SPARK_MASTER"
#: settings of a session started here outside spark-submit (small batches between stages)
DEFAULT_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.showConsoleProgress": "false",
}


def _kwarg(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--arg takes name=value, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def parser(description: str | None, inputs: Sequence[str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transactional-id", required=True, help="stable id of this stage (fences older instances)")
    p.add_argument("--group-id", help="consumer group whose offsets the stage reads from and commits "
                                      "(default: the transactional id)")
    p.add_argument("--inputs", default=",".join(inputs), help=f"comma-separated input topics (default: "
                                                               f"{','.join(inputs)})")
    p.add_argument("--transaction-timeout-ms", type=int, default=None,
                   help="default: the broker's stage_transaction_timeout_ms (10 minutes)")
    p.add_argument("--master", help="Spark master when not run by spark-submit")
    p.add_argument("--arg", action="append", type=_kwarg, default=[], metavar="NAME=VALUE",
                   help="keyword argument for run() (VALUE parsed as JSON when it is JSON)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--summary-file", help="also write the JSON summary here")
    return p


def spark_session(app_name: str, master: str | None = None, conf: dict[str, Any] | None = None,
                  ) -> tuple[Any, bool]:
    """The driver's SparkSession, set up in one place for every caller (the ``spark_apps``
    command line, TransactionalSparkOperator's in-task session, the spark-submit driver).

    The active session when there is one; else a new one, whose master is spark-submit's
    (it set ``PYSPARK_GATEWAY_PORT``), else ``master``, else ``$TXN_BROKER_SPARK_MASTER``,
    else ``local[2]``. A session this function starts outside spark-submit gets
    :data:`DEFAULT_SPARK_CONF`; ``conf`` overrides. Returns (session, created): the caller
    stops a session it created."""
    # Spark's Python workers run `python3` from PATH unless told otherwise: use this
    # interpreter, which has txn_broker and the stage's dependencies
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = SparkSession.builder.appName(app_name)
    settings: dict[str, Any] = dict(conf or {})
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or os.environ.get(SPARK_MASTER_ENV) or DEFAULT_MASTER)
        settings = {**DEFAULT_SPARK_CONF, **settings}
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate(), True


def print_summary(summary: dict[str, Any]) -> None:
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(map(str, value)) or "-"
        print(f"{key:<{width}}  {value}")


def main(run: Callable[..., Any], *, inputs: Sequence[str], description: str | None = None,
         argv: Sequence[str] | None = None) -> None:
    """Parse the command line, run ``run`` in a ``txn_stage``, print the summary, exit."""
    import txn_broker

    from .stage import txn_stage

    args = parser(description, inputs).parse_args(argv)
    topics = [t.strip() for t in args.inputs.split(",") if t.strip()]
    spark, _created = spark_session(args.transactional_id, args.master)
    broker = txn_broker.connect()
    stage = None
    status = 0
    try:
        with txn_stage(spark, broker, transactional_id=args.transactional_id,
                       group_id=args.group_id or args.transactional_id, inputs=topics,
                       transaction_timeout_ms=args.transaction_timeout_ms) as stage:
            run(spark, stage, **dict(args.arg))
    except Exception as error:
        print(f"stage {args.transactional_id} failed: {type(error).__name__}: {error}", file=sys.stderr)
        status = 1
    finally:
        broker.close()
        spark.stop()
    if stage is not None:
        summary = asdict(stage.summary)
        text = json.dumps(summary, sort_keys=True)
        if args.summary_file:
            with open(args.summary_file, "w") as f:
                f.write(text)
        if args.json:
            print(text, flush=True)
        else:
            print_summary(summary)
    sys.exit(status)
