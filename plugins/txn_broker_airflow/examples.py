"""Helpers of the example DAGs: the pipeline's topic definitions, which live with the
Spark stages in ``spark_apps/pipeline.py`` (one place for schemas, partitions and keys)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pyarrow as pa

from .loading import load_file_module
from .stage_runner import SPARK_APPS_ENV


def spark_apps_dir(dag_file: str | Path) -> Path:
    """Where an example DAG finds its stage files: ``$TXN_BROKER_SPARK_APPS``; else
    ``spark_apps/`` in the DAG file's own folder (a deployed DAGs folder: copy ``dags/*.py``
    and ``spark_apps/`` into it, see docs/airflow.md); else the ``spark_apps/`` next to that
    folder (this repository, where ``dags/`` and ``spark_apps/`` are siblings)."""
    configured = os.environ.get(SPARK_APPS_ENV)
    if configured:
        return Path(configured)
    folder = Path(dag_file).resolve().parent
    beside = folder / "spark_apps"
    return beside if beside.is_dir() else folder.parent / "spark_apps"


def pipeline_module(spark_apps: str | Path) -> ModuleType:
    """``spark_apps/pipeline.py`` of the given ``spark_apps`` directory, loaded by path (so
    the repository root need not be importable in the task's process)."""
    return load_file_module(Path(spark_apps) / "pipeline.py")


def pipeline_topics(spark_apps: str | Path, names: Iterable[str]) -> dict[str, tuple[int, pa.Schema]]:
    """``{topic: (partitions, schema)}`` of the named pipeline topics, for
    :meth:`txn_broker.Broker.ensure_topics`."""
    topics = pipeline_module(spark_apps).TOPICS
    return {name: (topics[name][1], topics[name][0]) for name in names}


def accept_orders(records: pa.Table, event_ids: list[str]) -> pa.Table:
    """The ``orders_events`` stage: every committed ``orders_raw`` record as an
    ``orders_accepted`` record, with its source partition and offset and the ids of the
    events whose run processed it (one output record per input record, so a test can see
    that each was processed exactly once)."""
    columns = [n for n in records.column_names if not n.startswith("_")]
    out = records.select(columns)
    out = out.append_column("source_partition", records.column("_partition").cast(pa.int32()))
    out = out.append_column("source_offset", records.column("_offset").cast(pa.int64()))
    return out.append_column("event_ids", pa.array([",".join(event_ids)] * records.num_rows, pa.string()))
