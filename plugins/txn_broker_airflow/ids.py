"""Transactional ids and group ids derived from the running task instance.

The default transactional id of a task is ``{dag_id}.{task_id}``, plus ``.{map_index}`` for
a mapped task instance: the same for every try of that task, so a retry (or a zombie's
replacement) fences the attempt before it. It is the same for every DAG run too, so two
runs of one task at the same time fence each other: DAGs using these operators should
set ``max_active_runs=1`` (the example DAGs do).
"""

from __future__ import annotations

import hashlib
from typing import Any

from txn_broker import validate_id

MAX_ID_LENGTH = 249


def default_transactional_id(dag_id: str, task_id: str, map_index: int | None = -1) -> str:
    """``dag_id.task_id[.map_index]``; ids longer than the broker allows are shortened
    with a hash suffix (stable: the same task always gets the same id)."""
    tid = f"{dag_id}.{task_id}"
    if map_index is not None and map_index >= 0:
        tid = f"{tid}.{map_index}"
    if len(tid) > MAX_ID_LENGTH:
        digest = hashlib.sha256(tid.encode()).hexdigest()[:16]
        tid = f"{tid[:MAX_ID_LENGTH - 17]}~{digest}"
    return tid


def transactional_id_for(context: Any, explicit: str | None = None) -> str:
    """``explicit`` (validated) or the task instance's default transactional id."""
    if explicit:
        return validate_id("transactional id", explicit)
    ti = context["ti"]
    return default_transactional_id(ti.dag_id, ti.task_id, getattr(ti, "map_index", -1))
