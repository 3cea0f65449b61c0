"""Running the worker script in OS processes against a test backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).with_name("_workers.py")
ROOT = Path(__file__).resolve().parents[2]


def worker_env(backend, extra=None):
    env = {**os.environ, **backend.env, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def start(backend, *args, extra_env=None):
    return subprocess.Popen(
        [sys.executable, str(WORKERS), *map(str, args)],
        env=worker_env(backend, extra_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def run_all(procs, timeout=180):
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"worker failed ({p.returncode}): {err[-3000:]}"
        outs.append(out)
    return outs
