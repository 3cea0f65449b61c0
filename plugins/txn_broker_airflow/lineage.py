"""OpenLineage for the broker's operators: the methods Airflow's OpenLineage provider calls
(``get_openlineage_facets_on_start``, ``..._on_complete``, ``..._on_failure``), in one mixin,
so an operator only names its input and output topics (and any other dataset, such as the
load's PostgreSQL table).

Datasets: a topic is ``namespace=txn-broker://<database host>:<port>/<database>``,
``name=<topic>``. The metadata database is what a topic belongs to (two brokers sharing an
object store but not a database are two sets of topics; one database is one set whatever
the store), and the namespace names it without a user or password. An SQLite broker is
``txn-broker://localhost/<path of the file>``.

Facets: each topic carries a ``schema`` facet from its Arrow schema; outputs carry
``outputStatistics`` (records, and bytes when known); a transactional operator's run
carries ``txnBroker_transaction``: transactional id, producer id and epoch, transaction
id, state, per partition the offsets the transaction wrote and its marker (COMMIT,
ABORT, or none while open), and the consumer-group offsets it committed with them
(``groupOffsets``: the input a stage consumed). docs/observability.md lists them.

Operators: the ingest (``ProduceToTopicOperator``), the Spark stage
(``TransactionalSparkOperator``), the event-driven stage
(``ProcessCommittedRecordsOperator``) and the load (``TopicToPostgresOperator``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import attrs

TRANSACTION_FACET = "txnBroker_transaction"
NAMESPACE_SCHEME = "txn-broker"


def broker_namespace(database_location: str) -> str:
    """The dataset namespace of a broker from its database URL (password masked or not:
    neither the user nor the password is kept)."""
    url = urlsplit(database_location)
    if url.scheme.startswith("sqlite"):
        return f"{NAMESPACE_SCHEME}://localhost/{url.path.lstrip('/')}"
    port = f":{url.port}" if url.port else ""
    return f"{NAMESPACE_SCHEME}://{url.hostname or 'localhost'}{port}{url.path}"


def _run_facet_base() -> Any:
    from openlineage.client.facet_v2 import RunFacet

    return RunFacet


def transaction_facet(**fields: Any) -> Any:
    """The custom run facet ``txnBroker_transaction``."""
    base = _run_facet_base()

    @attrs.define
    class TxnBrokerTransactionRunFacet(base):  # type: ignore[misc,valid-type]
        transactionalId: str = attrs.field()  # noqa: N815 - OpenLineage's camel case
        producerId: int | None = attrs.field(default=None)  # noqa: N815
        producerEpoch: int | None = attrs.field(default=None)  # noqa: N815
        transactionId: int | None = attrs.field(default=None)  # noqa: N815
        state: str | None = attrs.field(default=None)
        partitions: list[dict[str, Any]] = attrs.field(factory=list)
        groupOffsets: list[dict[str, Any]] = attrs.field(factory=list)  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return "https://github.com/txn-broker/txn-broker/blob/main/docs/observability.md#openlineage"

    return TxnBrokerTransactionRunFacet(**fields)


class TxnBrokerLineageMixin:
    """OpenLineage methods for an operator with ``txn_broker_conn_id``. Override
    :meth:`lineage_topics` (input and output topic names) and, for other datasets,
    :meth:`lineage_other_datasets`."""

    txn_broker_conn_id: str

    def lineage_topics(self) -> tuple[list[str], list[str]]:
        return [], []

    def lineage_other_datasets(self, result: dict[str, Any] | None) -> tuple[list[Any], list[Any]]:
        return [], []

    def lineage_output_statistics(self, result: dict[str, Any] | None) -> dict[str, tuple[int, int | None]]:
        """{output topic: (records, bytes or None)} of a finished run. Bytes left None are
        taken from the run's committed transaction when it wrote exactly those records."""
        return {}

    # -- what Airflow's OpenLineage provider calls -----------------------------------------

    def get_openlineage_facets_on_start(self) -> Any:
        return self._lineage(None, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._lineage(task_instance, _result(task_instance))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._lineage(task_instance, None)

    # -- building them ---------------------------------------------------------------------

    def _lineage(self, task_instance: Any, result: dict[str, Any] | None) -> Any:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import InputDataset, OutputDataset
        from openlineage.client.facet_v2 import output_statistics_output_dataset, schema_dataset

        from .hooks.txn_broker import TxnBrokerHook

        inputs, outputs = self.lineage_topics()
        hook = TxnBrokerHook(self.txn_broker_conn_id)
        try:
            broker = hook.get_conn()
            namespace = broker_namespace(broker.database_location)
            running = getattr(self, "running_transaction", None)
            described = None
            if task_instance is not None and running is not None:
                try:
                    described = broker.describe_transaction(running[0])
                except Exception:  # noqa: BLE001 - lineage never fails a task (an id never initialised)
                    pass
            stats = _with_committed_bytes(self.lineage_output_statistics(result), described)

            def dataset(topic: str, output: bool) -> Any:
                facets: dict[str, Any] = {}
                try:
                    schema = broker.describe_topic(topic).schema
                    facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=[
                        schema_dataset.SchemaDatasetFacetFields(name=f.name, type=str(f.type)) for f in schema])
                except Exception:  # noqa: BLE001 - lineage never fails a task; a topic not there yet has no schema
                    pass
                if not output:
                    return InputDataset(namespace=namespace, name=topic, facets=facets)
                output_facets: dict[str, Any] = {}
                if topic in stats:
                    records, size = stats[topic]
                    output_facets["outputStatistics"] = \
                        output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=records, size=size)
                return OutputDataset(namespace=namespace, name=topic, facets=facets, outputFacets=output_facets)

            run_facets: dict[str, Any] = {}
            if described is not None and running is not None:
                run_facets[TRANSACTION_FACET] = self._transaction_facet(described, running[1])
            other_in, other_out = self.lineage_other_datasets(result)
            return OperatorLineage(inputs=[dataset(t, False) for t in inputs] + other_in,
                                   outputs=[dataset(t, True) for t in outputs] + other_out,
                                   run_facets=run_facets)
        finally:
            hook.close()

    @staticmethod
    def _transaction_facet(described: Any, epoch: int | None) -> Any:
        return transaction_facet(
            transactionalId=described.transactional_id, producerId=described.producer_id,
            producerEpoch=described.producer_epoch if epoch is None else epoch,
            transactionId=described.txn_id, state=described.state,
            partitions=[{"topic": p.topic, "partition": p.partition, "firstOffset": p.first_offset,
                         "lastOffset": p.last_offset, "records": p.record_count, "bytes": p.size_bytes,
                         "marker": p.marker}
                        for p in described.partitions],
            groupOffsets=[{"group": o["group_id"], "topic": o["topic"], "partition": o["partition_no"],
                           "offset": o["committed_offset"]} for o in described.pending_offsets])


def _with_committed_bytes(stats: dict[str, tuple[int, int | None]],
                          described: Any) -> dict[str, tuple[int, int | None]]:
    """``stats`` with the bytes an operator did not know taken from its committed
    transaction, for each topic where that transaction wrote exactly the records counted
    (so a run that committed nothing new never reports an earlier run's bytes)."""
    if described is None or described.state != "CompleteCommit":
        return stats
    filled: dict[str, tuple[int, int | None]] = {}
    for topic, (records, size) in stats.items():
        parts = [p for p in described.partitions if p.topic == topic and p.marker == "COMMIT"]
        if size is None and records and sum(p.record_count for p in parts) == records:
            size = sum(p.size_bytes for p in parts)
        filled[topic] = (records, size)
    return filled


def _result(task_instance: Any) -> dict[str, Any] | None:
    """The task's return value (its XCom), if it has one."""
    try:
        value = task_instance.xcom_pull(task_ids=task_instance.task_id)
    except Exception:  # noqa: BLE001 - lineage never fails a task
        return None
    return value if isinstance(value, dict) else None


def table_dataset(url: Any, db_schema: str | None, table: str, rows: int | None) -> Any:
    """A load's target table as OpenLineage names it: on PostgreSQL namespace
    ``postgres://<host>:<port>``, name ``<database>.<schema>.<table>`` (schema ``public``
    unless given); on the demo's SQLite fallback ``sqlite://<path>`` and the table's name."""
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import output_statistics_output_dataset

    facets: dict[str, Any] = {}
    if rows is not None:
        facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=rows)
    if url.get_backend_name() == "postgresql":
        return OutputDataset(namespace=f"postgres://{url.host or 'localhost'}:{url.port or 5432}",
                             name=f"{url.database}.{db_schema or 'public'}.{table}", outputFacets=facets)
    return OutputDataset(namespace=f"sqlite://{url.database}", name=table, outputFacets=facets)
