"""Fault injection: named points in the produce, commit, abort and sweep paths.

Tests crash the broker between the steps of a commit to prove every crash point is
recovered. Two ways to arm a point:

* in-process: ``set_fault_hook(fn)``; ``fn(point)`` runs at every point and may raise;
* across processes: ``TXN_BROKER_FAULTS="commit.during_end=kill,produce.after_register=lose"``.
  Actions: ``kill`` (SIGKILL this process), ``raise`` (an InjectedFault),
  ``lose`` (the step succeeded but its reply is lost: a retriable error is raised after it),
  ``sleep:MS`` (``sleep:MS@DIR``: first create a file named after the point, the pid
  and the time in DIR), ``pause:PATH`` (write this process's pid to PATH, then wait, up to 10
  minutes, to be killed: a test that must kill a whole process tree, such as a Spark
  driver with its JVM and Python workers, waits for PATH and kills it at that step).
  ``TXN_BROKER_FAULTS_KILL_RATE=0.02`` kills at any point with that probability
  (seeded by ``TXN_BROKER_FAULTS_SEED``), for randomized chaos runs.

Points: produce.after_upload, produce.after_register, offsets.after_send,
commit.before_end (the producer uploaded everything; EndTxn, which also registers the
last segments, is next), commit.during_end and
abort.during_end (inside EndTxn's database transaction, after the markers are written,
before the database commits: a crash there must roll all of it back; a ``lose`` there acts
like ``raise``), commit.after_end, abort.after_end, sweep.after_claim (inside the sweep's
fencing transaction), sweep.after_fence (the epoch bump committed, the abort not yet),
and in the Spark data source: spark.before_register (the executors uploaded a write's
segments; the driver-side commit is about to register them), spark.after_register (they
are registered in the open transaction), spark.before_commit (``txn_stage``: the stage's
work is done, its offsets and commit are next), spark.task_write (in an executor: a write
task converted its input and uploads next; a ``sleep`` there keeps a stage's tasks
running, so a test can lose an executor mid-stage); in compaction
(:mod:`txn_broker.rewrite`), rewrite.before_swap (the merged output is written, not
registered) and rewrite.after_swap (registered, the inputs queued for deletion); and in
the Iceberg publisher: iceberg.after_write (a publish wrote its data files; the table
commit is next) and iceberg.after_commit (the table snapshot is committed).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable

from .errors import DatabaseUnavailableError, TxnBrokerError

POINTS = (
    "produce.after_upload",
    "produce.after_register",
    "offsets.after_send",
    "commit.before_end",
    "commit.during_end",
    "commit.after_end",
    "abort.during_end",
    "abort.after_end",
    "sweep.after_fence",
    "sweep.after_claim",
    "spark.before_register",
    "spark.after_register",
    "spark.before_commit",
    "spark.task_write",
    "rewrite.before_swap",
    "rewrite.after_swap",
    "iceberg.after_write",
    "iceberg.after_commit",
)


class InjectedFault(TxnBrokerError):
    """A fault injected by a test."""


class LostReply(DatabaseUnavailableError):
    """Injected: the step was applied, but its answer never reached the caller."""


_hook: Callable[[str], None] | None = None
_env_loaded = False
_env_actions: dict[str, str] = {}
_kill_rate = 0.0
_rng = random.Random()


def set_fault_hook(hook: Callable[[str], None] | None) -> None:
    """Install (or with None remove) the in-process hook called at every fault point."""
    global _hook
    _hook = hook


def _load_env() -> None:
    global _env_loaded, _kill_rate
    _env_loaded = True
    for item in filter(None, os.environ.get("TXN_BROKER_FAULTS", "").split(",")):
        point, _, action = item.partition("=")
        _env_actions[point.strip()] = action.strip() or "raise"
    _kill_rate = float(os.environ.get("TXN_BROKER_FAULTS_KILL_RATE", "0") or 0)
    seed = os.environ.get("TXN_BROKER_FAULTS_SEED")
    if seed is not None:
        _rng.seed(f"{seed}-{os.getpid()}")


def perform(action: str, point: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "lose":
        raise LostReply(f"injected: reply of {point} lost")
    elif action.startswith("sleep:"):
        ms, _, mark_dir = action.split(":", 1)[1].partition("@")
        if mark_dir:  # tell a watching test which process is in the sleep, and since when
            with open(os.path.join(mark_dir, f"{point}.{os.getpid()}.{time.time_ns()}"), "w"):
                pass
        time.sleep(int(ms) / 1000)
    elif action.startswith("pause:"):
        path = action.split(":", 1)[1]
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
        time.sleep(600)
        raise InjectedFault(f"injected pause at {point} was never ended by a kill")
    else:
        raise InjectedFault(f"injected fault at {point}")


def fault_point(point: str) -> None:
    """Called by the broker between steps; does nothing unless a test armed it."""
    if not _env_loaded:
        _load_env()
    if _hook is not None:
        _hook(point)
    action = _env_actions.get(point)
    if action:
        perform(action, point)
    if _kill_rate and _rng.random() < _kill_rate:
        os.kill(os.getpid(), signal.SIGKILL)
