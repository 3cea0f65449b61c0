"""Aborting a task's open transaction from outside the producer that opened it.

Used by ``on_kill`` (the task is being killed while its producer may be mid-call, so the
producer object is not touched) and by the failure listener (the task is already gone).
An admin abort bumps the producer epoch, so the old instance, if it still runs, is fenced
and can never commit; then the transaction is aborted and the partitions' last stable
offset moves on at once, instead of after the transaction timeout.

``producer_epoch``: when the caller knows the epoch its own try initialised (the task's
own process does), only a transaction still held at that epoch is aborted. A newer try of
the same task (a retry that already started) holds a newer epoch, and its transaction is
left alone. The check and the abort are two database transactions; a retry that
initialises in between is fenced by the abort and fails that try, which costs a retry,
never data.
"""

from __future__ import annotations

import logging

from txn_broker import is_open
from txn_broker.errors import InvalidTxnStateError, UnknownTransactionalIdError

from .hooks.txn_broker import TxnBrokerHook

log = logging.getLogger(__name__)

def abort_open_transaction(transactional_id: str, txn_broker_conn_id: str, *,
                           producer_epoch: int | None = None) -> str | None:
    """Abort ``transactional_id``'s open transaction (only if it is held at
    ``producer_epoch``, when given). Returns what was done ("aborted", "completed abort",
    "completed commit" for a commit already decided) or None when there was nothing to
    abort: no open transaction, an unknown id, or a newer epoch. Broker errors propagate."""
    hook = TxnBrokerHook(txn_broker_conn_id)
    try:
        broker = hook.get_conn()
        if producer_epoch is not None:
            current = broker.describe_transaction(transactional_id, history_limit=1)
            if not is_open(current.state):
                return None
            if current.producer_epoch != producer_epoch:
                log.info("transactional id %s is held by epoch %s, not this try's %s: left alone",
                         transactional_id, current.producer_epoch, producer_epoch)
                return None
        action = broker.abort_transaction(transactional_id)
    except (InvalidTxnStateError, UnknownTransactionalIdError):
        return None
    finally:
        hook.close()
    log.info("transactional id %s: %s transaction %s (producer epoch now %s)",
             transactional_id, action.action, action.txn_id, action.epoch)
    return action.action
