"""The failure listener: when a task instance of a transactional operator fails, abort its
open transaction at once, so ``read_committed`` readers of its partitions are not held
back until the transaction timeout.

Airflow calls ``on_task_instance_failed`` in two places, and both matter:

* in the task's own process, after ``execute`` raised (the operator normally aborted
  already; this catches an abort that itself failed, e.g. on a database hiccup);
* in the scheduler (or API server), when it declares a task instance failed that could
  not report for itself: a worker killed by the OOM killer, a lost heartbeat (zombie).

The abort is an admin abort: it bumps the producer epoch first, so if the "dead" task is
in fact still running it is fenced and can never commit. In the task's own process the
listener runs after the try's state was reported, when a retry may already be starting:
there it aborts only a transaction still held at the epoch this try initialised (see
``fencing.py``), never the retry's. 'No open transaction' is the
normal case and is ignored. A listener must never raise: errors are logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)

#: operators whose task instances may hold a transaction open (names, because in the
#: scheduler the task is a deserialized operator, not an instance of our class)
TRANSACTIONAL_TASK_TYPES = frozenset({"TransactionalSparkOperator", "ProduceToTopicOperator"})


@dataclass(frozen=True)
class AbortTarget:
    """The transaction a failed task instance may have left open."""

    transactional_id: str
    txn_broker_conn_id: str
    #: the epoch the failed try held, when known (in the task's own process): only a
    #: transaction at that epoch is aborted, never a newer try's
    producer_epoch: int | None = None


def _rendered(task_instance: Any, field: str) -> str | None:
    """A template field as the task rendered it (the scheduler only has the template)."""
    try:
        from airflow.models.renderedtifields import RenderedTaskInstanceFields

        fields = RenderedTaskInstanceFields.get_templated_fields(task_instance) or {}
    except Exception:  # no metadata database here, or no rendered fields stored
        return None
    value = fields.get(field)
    return value if isinstance(value, str) and value else None


def _transactional_target(task_instance: Any) -> AbortTarget | None:
    """What to abort for a failed task instance of a transactional operator, or None
    when it is not one (or, in the task's own process, when its try opened nothing)."""
    from .hooks.txn_broker import DEFAULT_CONN_ID
    from .ids import default_transactional_id
    from .operators.base import TransactionalOperatorMixin

    task = getattr(task_instance, "task", None)
    if isinstance(task, TransactionalOperatorMixin):
        # the task's own process: the operator knows what this try opened
        running = task.running_transaction
        if running is None:
            return None
        tid, epoch = running
        return AbortTarget(tid, task.txn_broker_conn_id, epoch)
    # the scheduler or the API server: a deserialized operator, which keeps the task type
    # and the template fields (so subclasses are recognised too), or only the ORM row
    marked = bool(getattr(task, "txn_broker_transactional", False)) or (
        task is not None and hasattr(task, "transactional_id") and hasattr(task, "txn_broker_conn_id"))
    task_type = getattr(task, "task_type", None) or getattr(task_instance, "operator", None)
    if not marked and task_type not in TRANSACTIONAL_TASK_TYPES:
        return None
    tid = getattr(task, "transactional_id", None)
    if isinstance(tid, str) and "{{" in tid:
        tid = _rendered(task_instance, "transactional_id")
    if not isinstance(tid, str) or not tid or "{{" in tid:
        # unset, or a template never rendered: the operators' default
        tid = default_transactional_id(task_instance.dag_id, task_instance.task_id,
                                       getattr(task_instance, "map_index", -1))
    conn_id = getattr(task, "txn_broker_conn_id", None)
    if isinstance(conn_id, str) and "{{" in conn_id:
        conn_id = _rendered(task_instance, "txn_broker_conn_id")
    if not isinstance(conn_id, str) or not conn_id or "{{" in conn_id:
        conn_id = DEFAULT_CONN_ID
    return AbortTarget(tid, conn_id)


class TxnBrokerFailureListener:
    """Registered through the ``txn_broker_airflow`` plugin."""

    @hookimpl
    def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
        target: AbortTarget | None = None
        try:
            target = _transactional_target(task_instance)
            if target is None:
                return
            from .fencing import abort_open_transaction

            outcome = abort_open_transaction(target.transactional_id, target.txn_broker_conn_id,
                                             producer_epoch=target.producer_epoch)
            if outcome:
                log.warning("task %s.%s failed with the transaction of %s open: %s", task_instance.dag_id,
                            task_instance.task_id, target.transactional_id, outcome)
        except Exception as failure:  # a listener must not break Airflow's failure handling
            # one line with the cause: the task's own failure was logged with its traceback
            # already, and a second traceback here would bury it
            from txn_broker import redact

            what = f"the transaction of {target.transactional_id}" if target else "the task's transaction"
            timeout = " it stays open until its transaction timeout, or the next try's init aborts it;"
            log.warning("txn_broker failure listener: task %s.%s: could not abort %s:%s %s: %s",
                        getattr(task_instance, "dag_id", "?"), getattr(task_instance, "task_id", "?"), what,
                        timeout, type(failure).__name__, redact(str(failure)).splitlines()[0] if str(failure) else "")


failure_listener = TxnBrokerFailureListener()
