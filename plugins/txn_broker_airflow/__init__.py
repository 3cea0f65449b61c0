"""The Airflow 3 layer of txn_broker, shaped like one of Airflow's own providers.

* ``hooks.txn_broker.TxnBrokerHook``: the ``txn_broker`` connection type, a cached Broker;
* ``operators``: ``TransactionalSparkOperator`` (one Spark stage, one transaction),
  ``ProduceToTopicOperator`` (files or a callable into a topic, exactly once) and
  ``TopicToPostgresOperator`` (committed records into a SQL table, exactly once),
  ``ProcessCommittedRecordsOperator`` (the event-driven stage);
* ``sensors`` / ``triggers``: ``TopicRecordsSensor`` and ``TransactionTimeoutSensor``,
  both deferrable;
* ``listeners``: aborts a failed task's open transaction at once (registered by the
  ``txn_broker_airflow`` plugin in ``plugins/txn_broker_airflow_plugin.py``);
* ``assets.topic_asset``: the Airflow Asset that stands for a topic.

DAGs import every operator, sensor, trigger and the hook from the package itself::

    from txn_broker_airflow import ProduceToTopicOperator, TopicSpec, TransactionalSparkOperator

Those names are resolved on first use (PEP 562 ``__getattr__``): importing the package
loads neither Airflow's operator machinery nor Spark, and connects to nothing. Nothing
here does I/O at import time; DAG files import these modules on every parse.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module (relative to this package, or absolute) that defines it
_EXPORTS: dict[str, str] = {
    "TxnBrokerHook": ".hooks.txn_broker",
    "ProduceToTopicOperator": ".operators.produce",
    "TopicToPostgresOperator": ".operators.topic_to_postgres",
    "TransactionalSparkOperator": ".operators.transactional_spark",
    "ProcessCommittedRecordsOperator": ".operators.committed_records",
    "TopicRecordsSensor": ".sensors.topic_records",
    "TransactionTimeoutSensor": ".sensors.transaction_timeout",
    "TopicRecordsTrigger": ".triggers.topic_records",
    "TransactionTimeoutTrigger": ".triggers.transaction_timeout",
    "CommittedRecordsEventTrigger": ".triggers.committed_records",
    "topic_asset": ".assets",
    "committed_records_asset": ".assets",
    # the declared topics operators take (``topics=[TopicSpec(...)]``)
    "TopicSpec": "txn_broker",
}

__all__ = [  # noqa: RUF022 (grouped as above)
    "__version__",
    "TxnBrokerHook",
    "ProduceToTopicOperator", "TopicToPostgresOperator", "TransactionalSparkOperator",
    "ProcessCommittedRecordsOperator",
    "TopicRecordsSensor", "TransactionTimeoutSensor",
    "TopicRecordsTrigger", "TransactionTimeoutTrigger", "CommittedRecordsEventTrigger",
    "topic_asset", "committed_records_asset",
    "TopicSpec",
]

if TYPE_CHECKING:
    from txn_broker import TopicSpec

    from .assets import committed_records_asset, topic_asset
    from .hooks.txn_broker import TxnBrokerHook
    from .operators.committed_records import ProcessCommittedRecordsOperator
    from .operators.produce import ProduceToTopicOperator
    from .operators.topic_to_postgres import TopicToPostgresOperator
    from .operators.transactional_spark import TransactionalSparkOperator
    from .sensors.topic_records import TopicRecordsSensor
    from .sensors.transaction_timeout import TransactionTimeoutSensor
    from .triggers.committed_records import CommittedRecordsEventTrigger
    from .triggers.topic_records import TopicRecordsTrigger
    from .triggers.transaction_timeout import TransactionTimeoutTrigger


def __getattr__(name: str) -> Any:
    """Import the module of a public name on first use, and keep the name here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def _require_broker() -> None:
    """Fail the import with what to install when this worker lacks the ``txn-broker``
    package (DAG files import this layer, so the message is the DAG's import error and
    the task's failure, instead of a ModuleNotFoundError deep in an operator)."""
    try:
        import txn_broker  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "txn_broker_airflow needs the txn-broker package, which this Airflow worker does not have "
            f"({error}): install it where tasks run, `pip install 'txn-broker[airflow]' -c constraints.txt` "
            "(docs/deployment.md)",
            name="txn_broker",
        ) from None


_require_broker()
