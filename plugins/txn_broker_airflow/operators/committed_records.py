"""``ProcessCommittedRecordsOperator``: the task of an event-driven DAG. It processes the
offset ranges of the committed-records events that started its run, exactly once
(``event_ranges.process_ranges``): one transaction writes ``transform``'s output and
commits the ranges' ends as the group's offsets.

    committed_orders = committed_records_asset(["orders_raw"], "orders_events.accept")

    with DAG("orders_events", schedule=[committed_orders], max_active_runs=1, ...):
        ProcessCommittedRecordsOperator(task_id="accept_orders", events_asset=committed_orders,
                                        output_topic="orders_accepted",
                                        transform="txn_broker_airflow.examples.accept_orders")

The transactional id defaults to ``{dag_id}.{task_id}[.map_index]``, the same for every run
and try. OpenLineage (``lineage.py``): the watched topics in, ``output_topic`` out, with the
records and bytes committed and the transaction, ranges' ends included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from ..assets import output_assets
from ..hooks.txn_broker import DEFAULT_CONN_ID, TxnBrokerHook
from ..lineage import TxnBrokerLineageMixin
from ..loading import import_callable
from ..table_publishing import publish_outlet_tables
from ..topic_setup import declared_topics, set_up_topics
from .base import TransactionalOperatorMixin

if TYPE_CHECKING:
    from airflow.sdk import Asset, Context

    from txn_broker import TopicSpec


def watched_topics(asset: Asset | None) -> list[str]:
    """The topics a ``committed_records_asset``'s trigger watches (none for another asset)."""
    topics: list[str] = []
    for watcher in getattr(asset, "watchers", None) or []:
        for topic in getattr(getattr(watcher, "trigger", None), "topics", None) or []:
            if topic not in topics:
                topics.append(topic)
    return topics


class ProcessCommittedRecordsOperator(TxnBrokerLineageMixin, TransactionalOperatorMixin, BaseOperator):
    """Process the committed records announced by the events of ``events_asset`` (a
    ``committed_records_asset``) that started this run; without such an event (``dag.test()``,
    a manual run) the payloads in ``params["events"]``.

    ``transform``: a dotted path to ``f(records, event_ids) -> pyarrow.Table`` (records
    carry ``_topic``, ``_partition``, ``_offset``, ``_timestamp``); its output goes to
    ``output_topic`` (partitioned by ``key`` when given), declared as the task's outlet.
    ``inputs``: the topics read, for lineage (default: those the asset's trigger watches).
    ``topics``: ``TopicSpec`` values created when missing, checked when they exist; an
    output declared with ``iceberg.enabled`` adds its table's Asset to the outlets, and the
    table is published after the commit.

    XCom: ``process_ranges``'s summary (``event_ids``, ``announced``, ``processed``,
    ``already_committed``, ``records_in``, ``records_out``, ``outcome``, transactional id,
    producer id and epoch).
    """

    template_fields: Sequence[str] = ("output_topic", "transactional_id", "txn_broker_conn_id")
    ui_color = "#e8daef"

    def __init__(
        self,
        *,
        output_topic: str,
        transform: str,
        events_asset: Asset | None = None,
        inputs: list[str] | None = None,
        key: str | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int | None = None,
        topics: list[TopicSpec] | None = None,
        txn_broker_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        declared = declared_topics(topics, kwargs.get("task_id", "?"))
        if not isinstance(transform, str):
            raise ValueError("transform must be a dotted path string, e.g. 'mypkg.orders.accept'")
        if "outlets" not in kwargs and "{{" not in output_topic:
            kwargs["outlets"] = output_assets([output_topic], declared, txn_broker_conn_id)
        super().__init__(**kwargs)
        self.topics = declared
        self.output_topic = output_topic
        self.transform = transform
        self.events_asset = events_asset
        self.inputs = list(inputs) if inputs is not None else watched_topics(events_asset)
        self.key = key
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.txn_broker_conn_id = txn_broker_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from ..event_ranges import process_ranges, run_events

        tid = self.resolve_transactional_id(context)
        events = run_events(context, self.events_asset)
        hook = TxnBrokerHook(self.txn_broker_conn_id)
        try:
            broker = hook.get_conn()
            set_up_topics(broker, self.topics, [*self.inputs, self.output_topic], self.task_id,
                          self.txn_broker_conn_id)
            summary = process_ranges(broker, transactional_id=tid, events=events, output_topic=self.output_topic,
                                     transform=import_callable(self.transform), key=self.key,
                                     transaction_timeout_ms=self.transaction_timeout_ms,
                                     on_init=self.remember_producer_epoch)
            tables = publish_outlet_tables(broker, self.outlets, self.txn_broker_conn_id)
            if tables:
                summary["iceberg"] = tables
        finally:
            hook.close()
        self.log.info("%s: %s, %s record(s) in, %s out", tid, summary["outcome"], summary.get("records_in"),
                      summary.get("records_out"))
        return summary

    # OpenLineage (lineage.py): the watched topics in, the output topic out
    def lineage_topics(self) -> tuple[list[str], list[str]]:
        return list(self.inputs), [self.output_topic]

    def lineage_output_statistics(self, result: dict[str, Any] | None) -> dict[str, tuple[int, int | None]]:
        return {self.output_topic: (int(result.get("records_out", 0)), None)} if result else {}
