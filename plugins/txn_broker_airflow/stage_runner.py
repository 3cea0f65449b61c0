"""Running one Spark stage inside a transaction: the part of TransactionalSparkOperator that
does not need Airflow, shared by the in-task SparkSession and the spark-submit driver.

A stage is a ``spark_apps`` file (a module with ``run(spark, stage, **kwargs)``) or a
dotted path to a function with that signature. It runs inside
``txn_broker.spark.stage.txn_stage``: init (fencing every older attempt), begin, read the
inputs from the group's committed offsets up to end offsets fixed at the start, write the
outputs, send the offsets and commit; abort on any failure.

Run as a program (``python -m txn_broker_airflow.stage_runner`` or through
``spark_submit_entry.py``) it is the spark-submit driver: it connects to the broker from
the ``TXN_BROKER_*`` environment, runs the stage, prints
``TXN_BROKER_STAGE_SUMMARY {json}`` and writes the same JSON to ``--summary-file``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import StageDefinitionError
from .loading import import_callable, load_file_module

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from txn_broker import Broker

log = logging.getLogger(__name__)

SUMMARY_PREFIX = "TXN_BROKER_STAGE_SUMMARY "
SPARK_APPS_ENV = "TXN_BROKER_SPARK_APPS"


@dataclass(frozen=True)
class StageSpec:
    """Everything a stage run needs, as plain values (it crosses process boundaries)."""

    application: str
    transactional_id: str
    group_id: str
    inputs: list[str]
    outputs: list[str] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: None: the broker's ``stage_transaction_timeout_ms``
    transaction_timeout_ms: int | None = None


def resolve_application(application: str) -> Callable[..., Any]:
    """The stage function: ``run`` of a ``.py`` file (absolute, relative to the working
    directory, or relative to ``$TXN_BROKER_SPARK_APPS``), or a dotted-path callable."""
    if application.endswith(".py") or os.sep in application:
        path = Path(application)
        if not path.is_absolute() and not path.exists() and os.environ.get(SPARK_APPS_ENV):
            path = Path(os.environ[SPARK_APPS_ENV]) / application
        module = load_file_module(path)
        run = getattr(module, "run", None)
        if not callable(run):
            raise StageDefinitionError(f"{path} has no function run(spark, stage, **kwargs)")
        return run
    return import_callable(application)


def plain(value: Any) -> Any:
    """``value`` as JSON-able data (dataclasses, named tuples, tuple keys flattened)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if hasattr(value, "_asdict"):
        value = value._asdict()
    if isinstance(value, dict):
        return {_key(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [plain(v) for v in value]
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)


def _key(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 2:  # TopicPartition
        return f"{key[0]}-{key[1]}"
    return str(key)


def run_stage(spark: SparkSession, broker: Broker, spec: StageSpec,
              on_start: Callable[[int | None], None] | None = None) -> dict[str, Any]:
    """Run the stage in one transaction; return its summary (JSON-able): records in and
    out, offsets, transactional id, producer id and epoch, outcome. ``on_start`` is called
    with the producer epoch once the transaction is initialised (before the stage runs).
    Raises what the stage or the broker raised, after the transaction was aborted (or,
    when a newer instance fenced this one, left to that instance)."""
    from txn_broker.spark import txn_stage

    func = resolve_application(spec.application)
    with txn_stage(spark, broker, transactional_id=spec.transactional_id, group_id=spec.group_id,
                   inputs=spec.inputs, transaction_timeout_ms=spec.transaction_timeout_ms) as stage:
        if on_start is not None:
            on_start(stage.summary.producer_epoch)
        func(spark, stage, **spec.kwargs)
    summary = plain(stage.summary)
    if not isinstance(summary, dict):
        summary = {"summary": summary}
    summary.setdefault("transactional_id", spec.transactional_id)
    summary.setdefault("group_id", spec.group_id)
    return summary


def main(argv: list[str] | None = None) -> None:
    """The spark-submit driver (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--application", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--group-id", required=True)
    parser.add_argument("--inputs", required=True, help="JSON list of topics")
    parser.add_argument("--outputs", default="[]", help="JSON list of topics")
    parser.add_argument("--kwargs", default="{}", help="JSON object passed to the stage")
    parser.add_argument("--transaction-timeout-ms", type=int, default=None)
    parser.add_argument("--summary-file", default=None)
    args = parser.parse_args(argv)
    spec = StageSpec(args.application, args.transactional_id, args.group_id, json.loads(args.inputs),
                     json.loads(args.outputs), json.loads(args.kwargs), args.transaction_timeout_ms)

    import txn_broker
    from txn_broker.spark import spark_session

    spark, _created = spark_session(spec.transactional_id)
    broker = txn_broker.connect()
    try:
        summary = run_stage(spark, broker, spec)
    finally:
        broker.close()
        spark.stop()
    text = json.dumps(summary, sort_keys=True)
    print(SUMMARY_PREFIX + text, flush=True)
    if args.summary_file:
        Path(args.summary_file).write_text(text)


if __name__ == "__main__":
    main()
