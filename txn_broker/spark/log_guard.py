"""Credentials passed to Spark stay out of logs: py4j logs every command it sends to the
JVM at DEBUG, options included, so a driver with DEBUG logging on would print the
database password and the S3 secret that :func:`~txn_broker.spark.options.connection_options`
hands to the ``txn_topic`` source. The secrets of every such call are registered here and
masked in py4j's records (and any URL password or credential parameter with them)."""

from __future__ import annotations

import logging
import threading

from ..redaction import redact

#: py4j's loggers (a filter on a parent logger does not see its children's records)
PY4J_LOGGERS = ("py4j", "py4j.java_gateway", "py4j.clientserver", "py4j.protocol")

_lock = threading.Lock()
_secrets: set[str] = set()
_installed = False


class _RedactSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        with _lock:
            secrets = tuple(_secrets)
        message = record.getMessage()
        masked = redact(message, secrets)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def guard_secrets(*secrets: str | None) -> None:
    """Mask ``secrets`` in py4j's log records from now on."""
    global _installed
    with _lock:
        _secrets.update(s for s in secrets if s)
        if _installed:
            return
        _installed = True
    guard = _RedactSecrets()
    for name in PY4J_LOGGERS:
        logging.getLogger(name).addFilter(guard)
