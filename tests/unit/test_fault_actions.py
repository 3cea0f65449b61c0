"""The ``sleep:MS@DIR`` fault action: it marks which process sleeps at which point, so a
test (tests/e2e/test_topology.py) can strike while a Spark write task is running."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from txn_broker import faults


@pytest.fixture
def armed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    def arm(spec: str) -> None:
        monkeypatch.setenv("TXN_BROKER_FAULTS", spec)
        monkeypatch.setattr(faults, "_env_loaded", False)
        monkeypatch.setattr(faults, "_env_actions", {})

    yield arm


def test_sleep_with_a_mark_names_point_pid_and_time(armed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    armed(f"spark.task_write=sleep:50@{tmp_path}")
    before = time.time_ns()
    started = time.monotonic()
    faults.fault_point("spark.task_write")
    assert time.monotonic() - started >= 0.05
    (mark,) = tmp_path.iterdir()
    point, pid, at = mark.name.rsplit(".", 2)
    assert point == "spark.task_write" and int(pid) == os.getpid() and before <= int(at) <= time.time_ns()


def test_plain_sleep_leaves_no_mark_and_other_points_do_nothing(armed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    armed("spark.task_write=sleep:1")
    faults.fault_point("spark.task_write")
    faults.fault_point("commit.before_end")
    assert list(tmp_path.iterdir()) == []
    assert "spark.task_write" in faults.POINTS
