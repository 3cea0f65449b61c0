"""``txn_broker_maintenance``: every 10 minutes, the coordinator's sweeps and garbage collection.

1. ``sweep``: ``TransactionTimeoutSensor`` aborts transactions past their timeout (fencing
   their producers first), rolls decided ones forward and expires idle transactional ids;
   it defers to the triggerer until no transaction past its timeout blocks readers.
2. ``collect_garbage``: ``Broker.gc`` purges the segments of aborted
   transactions, applies the topics' retention, compacts small committed segments into
   segments of about each topic's ``segment.bytes`` (dropping aborted records), deletes
   queued objects whose delete delay has passed and orphan objects older than the grace
   period.
3. ``publish_iceberg``: ``Broker.publish_iceberg`` publishes every topic with
   ``iceberg.enabled`` to its Iceberg table (after gc, so that data files retention left
   below a partition's log start leave the table in the same run; docs/iceberg.md).
4. ``report``: one line with what they did.

Every step is idempotent and safe next to running producers, consumers and other runs,
so overlapping, repeated or retried runs are harmless. Params: ``orphan_grace_ms`` (default:
gc's own, at least a day) and ``dry_run``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task
from txn_broker_airflow.sensors.transaction_timeout import TransactionTimeoutSensor

with DAG(
    dag_id="txn_broker_maintenance",
    schedule=timedelta(minutes=10),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    params={
        "dry_run": Param(False, type="boolean", description="report what gc would delete, delete nothing"),
        "orphan_grace_ms": Param(None, type=["null", "integer"], minimum=0,
                                 description="keep unregistered objects younger than this (default: a day)"),
    },
    tags=["txn_broker", "maintenance"],
    doc_md=__doc__,
) as dag:
    sweep = TransactionTimeoutSensor(task_id="sweep", poke_interval=10, timeout=300)

    @task
    def collect_garbage(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Delete the segment objects no reader can need any more."""
        import logging

        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        log = logging.getLogger("txn_broker_maintenance.gc")
        params = params or {}
        hook = TxnBrokerHook()
        try:
            report = hook.get_conn().gc(dry_run=bool(params.get("dry_run")),
                                        orphan_grace_ms=params.get("orphan_grace_ms"), progress=log.info)
        finally:
            hook.close()
        result = report.to_dict()
        result["truncations"] = len(result.get("truncations") or [])
        return result

    @task
    def publish_iceberg(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Publish what was committed to the topics' Iceberg tables (none: no topic has
        iceberg.enabled). A dry run publishes nothing."""
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        if (params or {}).get("dry_run"):
            return []
        hook = TxnBrokerHook()
        try:
            return [r.to_dict() for r in hook.get_conn().publish_iceberg()]
        finally:
            hook.close()

    @task
    def report(swept: dict[str, Any], collected: dict[str, Any], published: list[dict[str, Any]]) -> str:
        line = (f"sweeps: aborted {len(swept.get('aborted', []))}, rolled forward "
                f"{len(swept.get('completed', []))}, expired ids {len(swept.get('expired_ids', []))}; "
                f"gc{' (dry run)' if collected.get('dry_run') else ''}: purged "
                f"{collected.get('aborted_segments', 0)} aborted segments, truncated "
                f"{collected.get('retention_segments', 0)} by retention, merged "
                f"{collected.get('compacted_segments', 0)} small segments into "
                f"{collected.get('compaction_outputs', 0)}, deleted "
                f"{collected.get('objects_deleted', 0)} objects and {collected.get('orphans_deleted', 0)} orphans; "
                f"iceberg: {sum(p['rows'] for p in published)} rows published to {len(published)} tables")
        print(line)
        return line

    collected = collect_garbage()
    sweep >> collected  # gc purges what the sweep just aborted
    published = publish_iceberg()
    collected >> published  # retention applied first: the publish expires the files it left behind
    report(sweep.output, collected, published)
