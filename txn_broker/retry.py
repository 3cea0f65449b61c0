"""Retrying a client request after a retriable error (docs/semantics.md, "Errors and what to do with each"), with
exponential backoff and jitter: what the producer and the Spark writer share."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from .errors import TxnBrokerError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: attempts of one request, the first included
RETRY_ATTEMPTS = 6


def retrying(call: Callable[[], T], attempts: int = RETRY_ATTEMPTS) -> T:
    """Run ``call``, again after a retriable TxnBrokerError (backoff from 50 ms to 2 s);
    a non-retriable error, or the last attempt's, is raised."""
    delay = 0.05
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except TxnBrokerError as error:
            if not error.retriable or attempt == attempts:
                raise
            log.warning("retrying after %s (attempt %d)", error, attempt)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")
