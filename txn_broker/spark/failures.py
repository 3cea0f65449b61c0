"""Turning a Spark failure caused by the broker back into the broker's typed error.

An error raised in the data source's code (a Python worker) reaches the driver wrapped in
Spark's own exception, with the original as text. ``broker_error`` finds the last broker
error named there and rebuilds it, so callers can ``except SchemaMismatchError`` and see
whether to retry, abort or stop (``error.handling``).
"""

from __future__ import annotations

import re

from .. import errors

_NAMED = re.compile(r"(?:txn_broker\.[\w.]*\.)?\b([A-Z]\w*Error): ([^\n]*)")


def _classes() -> dict[str, type[errors.TxnBrokerError]]:
    found: dict[str, type[errors.TxnBrokerError]] = {}
    todo: list[type[errors.TxnBrokerError]] = [errors.TxnBrokerError]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def broker_error(error: BaseException) -> errors.TxnBrokerError | None:
    """The broker error a Spark exception carries, or None if it carries none."""
    if isinstance(error, errors.TxnBrokerError):
        return error
    classes = _classes()
    found = None
    for match in _NAMED.finditer(str(error)):
        cls = classes.get(match[1])
        if cls is not None:
            found = (cls, match[2].strip())
    if found is None:
        return None
    cls, message = found
    try:
        return cls(message)
    except TypeError:  # an error class with a constructor of its own
        return errors.TxnBrokerError(f"{cls.__name__}: {message}")
