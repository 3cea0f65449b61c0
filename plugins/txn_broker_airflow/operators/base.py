"""What every operator that writes to topics in a transaction shares."""

from __future__ import annotations

from typing import Any

from ..fencing import abort_open_transaction
from ..ids import transactional_id_for


class TransactionalOperatorMixin:
    """For operators with ``transactional_id`` and ``txn_broker_conn_id`` attributes.

    * ``txn_broker_transactional = True`` tells the failure listener that a failed task
      instance of this operator may have left a transaction open;
    * :meth:`resolve_transactional_id` and :meth:`remember_producer_epoch` record, in the
      running task, which transactional id and producer epoch this try uses, so that
      ``on_kill`` and the listener abort this try's transaction and never a newer try's;
    * ``on_kill`` aborts (and fences) the running transaction through the coordinator,
      without touching the producer, which may be in the middle of a call.
    """

    txn_broker_transactional = True
    transactional_id: str | None
    txn_broker_conn_id: str
    _running_transactional_id: str | None = None
    _running_producer_epoch: int | None = None

    def resolve_transactional_id(self, context: Any) -> str:
        tid = transactional_id_for(context, self.transactional_id)
        self._running_transactional_id = tid
        self._running_producer_epoch = None
        return tid

    def remember_producer_epoch(self, epoch: int | None) -> None:
        """Call right after ``init_transactions``: the epoch this try holds."""
        self._running_producer_epoch = epoch

    @property
    def running_transaction(self) -> tuple[str, int | None] | None:
        """(transactional id, producer epoch or None if not known yet) of the running try,
        or None when this operator has not started a transactional try in this process."""
        if self._running_transactional_id is None:
            return None
        return self._running_transactional_id, self._running_producer_epoch

    def on_kill(self) -> None:
        running = self.running_transaction
        if running is None:
            return
        tid, epoch = running
        outcome = abort_open_transaction(tid, self.txn_broker_conn_id, producer_epoch=epoch)
        self.log.info("on_kill: transactional id %s: %s", tid, outcome or "no open transaction")  # type: ignore[attr-defined]
