"""Case 8: a Spark stage through ``txn_topic`` against the same stage with plain Spark
Parquet (the case from the Spark issue). Target: throughput ratio ≥ 0.9 over at least
1M rows in 4 input partitions.

The stage itself is ``bench/spark_stage.py``, written with the Spark data source; it
exposes a self-contained ``run(...)``. This module only adapts it to the harness: it
passes the arguments ``run`` declares (from the names below) and turns what it returns
into figures. Without that module the case reports "not available"."""

from __future__ import annotations

import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .harness import CaseResult, Figure, Target, throughput_ratio
from .servers import ROOT, Backend
from .sizes import Sizes

TITLE = "Spark stage through txn_topic vs plain Spark Parquet"
TARGET = Target(">=", 0.9)
STAGE = Path(__file__).with_name("spark_stage.py")


def _arguments(run: Callable[..., Any], backend: Backend, sizes: Sizes, progress: Callable[[str], None]
               ) -> dict[str, Any]:
    offered = {"backend": backend, "sizes": sizes, "progress": progress, "rows": sizes.spark_rows,
               "reps": sizes.spark_reps, "database_url": backend.database_url, "storage_url": backend.storage_url,
               "env": dict(backend.env), "workdir": backend.root, "parquet_location": backend.location("spark-parquet"),
               "s3_endpoint_url": backend.s3.endpoint_url if backend.s3 else None}
    params = inspect.signature(run).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return offered
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty
               and p.kind is not inspect.Parameter.VAR_POSITIONAL and n not in offered]
    if missing:
        raise TypeError(f"bench/spark_stage.py run() needs {missing}, which the harness does not know")
    return {n: v for n, v in offered.items() if n in params}


def _figures(result: CaseResult, out: Any) -> None:
    if isinstance(out, CaseResult):
        result.figures, result.notes, result.series = out.figures, [*out.notes, *result.notes], out.series
        result.sizes = out.sizes or result.sizes
        return
    if not isinstance(out, dict):
        raise TypeError(f"bench/spark_stage.py run() returned {type(out).__name__}, expected a dict")
    seconds = out.get("seconds") or {}
    base = seconds.get("parquet") or out.get("parquet_s")
    cand = seconds.get("txn_topic") or out.get("txn_topic_s")
    if isinstance(base, list) and isinstance(cand, list):
        result.add(throughput_ratio("throughput, txn_topic stage / plain Parquet stage", base, cand, TARGET))
    elif "ratio" in out:
        result.add(Figure("throughput, txn_topic stage / plain Parquet stage", float(out["ratio"]), "×", TARGET))
    else:
        raise ValueError(f"bench/spark_stage.py run() returned no timings: {sorted(out)}")
    cpu_ratio = (out.get("breakdown") or {}).get("cpu_ratio")
    if isinstance(cpu_ratio, float) and math.isfinite(cpu_ratio) and cpu_ratio > 0:
        # the cost side of the same repetitions, steadier than wall time on a busy machine
        result.add(Figure("CPU efficiency, baseline CPU s / txn_topic CPU s (process tree)", cpu_ratio, "×", None))
    result.series = {k: v for k, v in out.items() if k not in ("sizes", "notes")}
    if out.get("sizes"):
        result.sizes = f"{out['sizes']}; {result.sizes}"
    result.notes.extend(map(str, out.get("notes", [])))


def stop_spark() -> None:
    """Stop the SparkSession the stage started, if any (its JVM is a child process)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    result = CaseResult(8, TITLE, backend.name, sizes=f"{sizes.spark_rows:,} rows, {sizes.spark_reps} interleaved "
                        "repetitions")
    if not STAGE.exists():
        result.status = "not available"
        result.notes.append("bench/spark_stage.py (the Spark stage, from the Spark work) is not in this checkout.")
        return result
    os.environ.setdefault("PYSPARK_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    stage = importlib.import_module("bench.spark_stage")
    try:
        _figures(result, stage.run(**_arguments(stage.run, backend, sizes, progress)))
    finally:
        # Spark's Python workers inherit the environment the JVM started with: each
        # backend (its S3 endpoint and credentials) gets a session of its own.
        stop_spark()
    return result
