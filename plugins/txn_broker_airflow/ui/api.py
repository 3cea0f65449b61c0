"""The plugin's JSON API, under ``<prefix>/api`` (``/txn-broker/api`` by default).

The page reads the broker only through these endpoints. Every endpoint needs an
authenticated Airflow user (the app-level dependency in ``app.py``); the one write,
``POST /transactions/{id}/abort``, also needs edit permission on the transaction's DAG
and a CSRF token (``security.py``). Answers are the dicts of ``views.py``; errors are
``{"detail": "..."}`` with 400 (bad input), 404 (unknown id, topic or group),
409 (no open transaction to abort), 503 (broker unavailable). Reference: ``docs/ui.md``.

Handlers are plain ``def``: the broker is blocking, so FastAPI runs them in its thread pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request, status

from txn_broker.errors import (
    InvalidInputError,
    InvalidTxnStateError,
    TxnBrokerError,
    UnknownGroupError,
    UnknownTopicOrPartitionError,
    UnknownTransactionalIdError,
)

from . import views
from .broker_source import SOURCE, BrokerSource
from .security import UserDep, check_csrf, csrf_token, may_abort, user_label, visible_dag_ids

log = logging.getLogger(__name__)
T = TypeVar("T")

router = APIRouter(prefix="/api", tags=["txn-broker"])


def _source(request: Request) -> BrokerSource:
    return getattr(request.app.state, "broker_source", SOURCE)


def _call(request: Request, work: Callable[[Any], T]) -> T:
    """Run ``work(broker)``, turning broker errors into HTTP errors with redacted messages."""
    source = _source(request)
    try:
        return work(source.broker())
    except (UnknownTransactionalIdError, UnknownTopicOrPartitionError, UnknownGroupError) as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, source.redact(str(error))) from None
    except InvalidTxnStateError as error:
        raise HTTPException(status.HTTP_409_CONFLICT, source.redact(str(error))) from None
    except InvalidInputError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, source.redact(str(error))) from None
    except TxnBrokerError as error:
        log.warning("txn_broker UI: broker unavailable: %s", source.redact(str(error)))
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"broker unavailable: {source.redact(str(error))}") from None
    except HTTPException:
        raise
    except Exception as error:  # e.g. a missing named connection: say what, never the secrets
        log.warning("txn_broker UI: cannot reach the broker: %s", source.redact(repr(error)))
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"broker unavailable: {type(error).__name__}: {source.redact(str(error))}") from None


@router.get("/session", summary="The signed-in user, what the user may do, and a CSRF token")
def session(request: Request, user: UserDep) -> dict[str, Any]:
    source = _source(request)
    try:
        location = source.location()
    except Exception as error:  # shown on the page; the broker calls will say more
        location = {"database": "unavailable", "storage": "", "source": source.redact(type(error).__name__)}
    return {"user": user_label(user), "csrf_token": csrf_token(user), "csrf_header": "X-CSRF-Token",
            "broker": location}


@router.get("/states", summary="The transaction states and their classes (open, prepared, idle)")
def states(user: UserDep) -> dict[str, Any]:
    return views.states()


@router.get("/transactions", summary="Transactional ids with their current transaction")
def list_transactions(
    request: Request,
    user: UserDep,
    state: Annotated[list[str] | None, Query(description="repeat for several states")] = None,
    q: Annotated[str, Query(max_length=249, description="substring of the transactional id")] = "",
    dag_id: Annotated[str, Query(max_length=250)] = "",
    hanging: bool = False,
    limit: Annotated[int, Query(ge=1, le=5000)] = views.DEFAULT_LIMIT,
) -> dict[str, Any]:
    unknown = sorted(set(state or ()) - set(views.STATES))
    if unknown:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"unknown state(s) {unknown}; states: {views.STATES}")
    dags = visible_dag_ids(user)
    return _call(request, lambda b: views.list_transactions(
        b, dags, states=state or (), text=q, dag_id=dag_id, hanging_only=hanging, limit=limit))


@router.post("/transactions/{transactional_id:path}/abort",
             summary="Abort the open transaction (fences its producer); needs DAG edit and a CSRF token")
def abort_transaction(request: Request, transactional_id: str, user: UserDep) -> dict[str, Any]:
    check_csrf(request, user)
    dags = visible_dag_ids(user)
    attribution = views.attribute(transactional_id, dags)
    if not may_abort(user, attribution.dag_id, attribution.dag_known):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            "Forbidden: aborting needs permission to edit the DAG "
                            f"{attribution.dag_id if attribution.dag_known else '(all DAGs)'}")
    action = _call(request, lambda b: b.abort_transaction(transactional_id))
    log.warning("txn_broker UI: user %s aborted transactional id %r: %s (txn %s, producer %s epoch %s)",
                user_label(user), transactional_id, action.action, action.txn_id, action.producer_id,
                action.epoch)
    detail = _call(request, lambda b: views.transaction_detail(b, transactional_id, dags))
    return {"action": action.action, "txn_id": action.txn_id, "producer_id": action.producer_id,
            "producer_epoch": action.epoch, "transaction": detail}


@router.get("/transactions/{transactional_id:path}", summary="One transactional id in detail")
def transaction(request: Request, transactional_id: str, user: UserDep) -> dict[str, Any]:
    dags = visible_dag_ids(user)
    detail = _call(request, lambda b: views.transaction_detail(b, transactional_id, dags))
    detail["can_abort"] = detail["open"] and may_abort(user, detail["dag_id"], detail["dag_known"])
    return detail


@router.get("/task-instance", summary="The transaction of a task instance (default transactional id)")
def task_instance(
    request: Request,
    user: UserDep,
    dag_id: Annotated[str, Query(min_length=1, max_length=250)],
    task_id: Annotated[str, Query(min_length=1, max_length=250)],
    map_index: str = "",
) -> dict[str, Any]:
    index = int(map_index) if map_index.strip().lstrip("-").isdigit() else None
    dags = visible_dag_ids(user)
    return _call(request, lambda b: views.task_instance_transaction(
        b, dag_id, task_id, index if index is not None and index >= 0 else None, dags))


@router.get("/dag-runs/{dag_id}/events",
            summary="The committed-records events that started a DAG's runs (one run with run_id)")
def dag_run_events(
    request: Request,
    dag_id: str,
    user: UserDep,
    run_id: Annotated[str, Query(max_length=250)] = "",
) -> dict[str, Any]:
    from .runs import dag_run_events as find

    if dag_id not in visible_dag_ids(user):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"DAG {dag_id!r} not found")
    try:
        return find(dag_id, run_id or None)
    except LookupError as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(error)) from None


@router.get("/topics", summary="Topics with totals over their partitions")
def topics(request: Request, user: UserDep) -> dict[str, Any]:
    return _call(request, views.list_topics)


@router.get("/topics/{name}", summary="One topic per partition: HW, LSO and its lag, segments, bytes")
def topic(request: Request, name: str, user: UserDep) -> dict[str, Any]:
    dags = visible_dag_ids(user)
    return _call(request, lambda b: views.topic_detail(b, name, dags))


@router.get("/groups", summary="Consumer groups with their lag")
def groups(request: Request, user: UserDep) -> dict[str, Any]:
    return _call(request, views.list_groups)


@router.get("/groups/{group_id:path}", summary="One consumer group: committed offset and lag per partition")
def group(request: Request, group_id: str, user: UserDep) -> dict[str, Any]:
    return _call(request, lambda b: views.group_detail(b, group_id))
