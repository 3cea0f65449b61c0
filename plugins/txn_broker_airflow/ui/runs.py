"""Which committed-records event started which DAG run: the asset events a DAG run
consumed (Airflow's metadata database), with the offset ranges their payloads announced.

The one part of the page that reads Airflow rather than the broker; it runs in the
api-server, where Airflow's ORM session is configured.
"""

from __future__ import annotations

from typing import Any

from ..event_ranges import is_event, payload_of
from ..ids import default_transactional_id

#: runs listed per DAG at most, newest first
MAX_RUNS = 50


def _event(ev: Any) -> dict[str, Any]:
    extra = ev.extra or {}
    payload = payload_of(extra) if is_event(extra) else None
    return {
        "asset_uri": ev.asset.uri if ev.asset is not None else None,
        "timestamp": ev.timestamp.isoformat() if ev.timestamp else None,
        "from_trigger": bool(extra.get("from_trigger")) if isinstance(extra, dict) else False,
        "source": f"{ev.source_dag_id}.{ev.source_task_id}" if ev.source_dag_id else None,
        "event_id": payload.get("event_id") if payload else None,
        "group_id": payload.get("group_id") if payload else None,
        "ranges": list(payload.get("ranges") or []) if payload else [],
        "offsets": payload.get("offsets") if payload else None,
    }


def _run(run: Any) -> dict[str, Any]:
    events = [_event(e) for e in sorted(run.consumed_asset_events, key=lambda e: (e.timestamp, e.id))]
    return {
        "run_id": run.run_id,
        "run_type": str(run.run_type),
        "state": str(run.state),
        "queued_at": run.queued_at.isoformat() if run.queued_at else None,
        "start_date": run.start_date.isoformat() if run.start_date else None,
        "end_date": run.end_date.isoformat() if run.end_date else None,
        "events": events,
        "event_ids": [e["event_id"] for e in events if e["event_id"]],
    }


def dag_run_events(dag_id: str, run_id: str | None = None, limit: int = MAX_RUNS) -> dict[str, Any]:
    """``{"dag_id", "runs": [{run_id, state, events: [{event_id, group_id, ranges, ...}]}]}``:
    one run (``run_id``) or the newest ``limit`` runs of ``dag_id``. LookupError when the
    run does not exist. Each task's default transactional id is listed, so the page links
    a run to the transactions that processed its ranges."""
    from airflow.models.asset import AssetEvent  # defines DagRun.consumed_asset_events (a backref)
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select
    from sqlalchemy.orm import configure_mappers, selectinload

    configure_mappers()  # the backref exists once the mappers are configured

    with create_session() as session:
        query = select(DagRun).where(DagRun.dag_id == dag_id).options(
            selectinload(DagRun.consumed_asset_events).joinedload(AssetEvent.asset))
        if run_id:
            query = query.where(DagRun.run_id == run_id)
        runs = list(session.scalars(query.order_by(DagRun.id.desc()).limit(limit)))
        if run_id and not runs:
            raise LookupError(f"DAG run {run_id!r} of {dag_id!r} not found")
        if not runs and session.scalar(select(DagModel.dag_id).where(DagModel.dag_id == dag_id)) is None:
            raise LookupError(f"DAG {dag_id!r} not found")
        task_ids: list[str] = []
        from airflow.models.serialized_dag import SerializedDagModel

        serialized = SerializedDagModel.get_dag(dag_id, session=session)
        if serialized is not None:
            task_ids = sorted(serialized.task_ids)
        return {"dag_id": dag_id, "runs": [_run(r) for r in runs],
                "transactional_ids": [default_transactional_id(dag_id, t) for t in task_ids]}
