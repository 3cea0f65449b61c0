"""The Airflow 3 layer of txn_broker, shaped like one of Airflow's own providers.

* ``hooks.txn_broker.TxnBrokerHook``: the ``txn_broker`` connection type, a cached Broker;
* ``operators``: ``TransactionalSparkOperator`` (one Spark stage, one transaction),
  ``ProduceToTopicOperator`` (files or a callable into a topic, exactly once) and
  ``TopicToPostgresOperator`` (committed records into a SQL table, exactly once);
* ``sensors`` / ``triggers``: ``TopicRecordsSensor`` and ``TransactionTimeoutSensor``,
  both deferrable;
* ``listeners``: aborts a failed task's open transaction at once (registered by the
  ``txn_broker_airflow`` plugin in ``plugins/txn_broker_airflow_plugin.py``);
* ``assets.topic_asset``: the Airflow Asset that stands for a topic.

Nothing here does I/O at import time; DAG files import these modules on every parse.
"""

from __future__ import annotations

__version__ = "0.1.0"


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
