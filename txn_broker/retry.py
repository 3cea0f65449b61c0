"""The one retry policy (docs/semantics.md, "Errors and what to do with each"): run a call
again after a transient error, with exponential backoff and jitter, until it succeeds, fails
in a way retrying cannot help, or the time budget (``Settings.retry_budget_ms``, 30 s by
default) would be exceeded by the next wait.

Several layers may want to retry the same failure: the producer or the Spark writer retries
a coordinator request, the request's ``Database.run`` re-runs a transaction the database
rolled back (a deadlock, a serialisation failure, a busy SQLite), the S3 store re-sends a
request that timed out. Layers nested like that must not multiply their attempts and
sleeps. So the outermost :func:`retrying` of a call decides: while it runs, every
:func:`retrying` inside it (in the same thread or task) makes exactly one attempt and
raises, and the outer one retries the whole call within its budget. A layer called on its
own (a consumer's poll reaching the store, an admin call reaching the database) is the
outermost and applies the policy itself. Either way a caller hears of an outage once the
budget is spent: after at most ``retry_budget_ms`` of waiting plus the last attempt.
"""

from __future__ import annotations

import contextvars
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from .errors import TxnBrokerError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the total time a call may spend waiting between attempts (``Settings.retry_budget_ms``)
DEFAULT_RETRY_BUDGET_MS = 30_000
#: the first wait (doubled after each attempt, jittered by up to 100 %) and the longest
FIRST_DELAY_S = 0.01
MAX_DELAY_S = 2.0

#: set while an outermost ``retrying`` runs: inner ones make a single attempt
_decided_above: contextvars.ContextVar[bool] = contextvars.ContextVar("txn_broker_retrying", default=False)


def is_retriable(error: BaseException) -> bool:
    """The broker's own rule: a TxnBrokerError that says it is retriable."""
    return isinstance(error, TxnBrokerError) and error.retriable


def retrying(call: Callable[[], T], budget_ms: int | None = None, *,
             retriable: Callable[[BaseException], bool] = is_retriable) -> T:
    """Run ``call``; after an error ``retriable`` accepts, wait (10 ms, doubling up to 2 s,
    with jitter) and run it again, as long as the total wait stays within ``budget_ms``
    (default :data:`DEFAULT_RETRY_BUDGET_MS`). Any other error, or the last one, is raised.
    Inside another ``retrying`` call, ``call`` runs once: the outer one decides."""
    if _decided_above.get():
        return call()
    token = _decided_above.set(True)
    try:
        budget_s = (DEFAULT_RETRY_BUDGET_MS if budget_ms is None else budget_ms) / 1000
        deadline = time.monotonic() + budget_s
        delay = FIRST_DELAY_S
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except Exception as error:
                if not retriable(error):
                    raise
                wait = delay * (1 + random.random())
                if time.monotonic() + wait > deadline:
                    raise
                log.warning("retrying after %s (attempt %d)", error, attempt)
                time.sleep(wait)
                delay = min(delay * 2, MAX_DELAY_S)
    finally:
        _decided_above.reset(token)
