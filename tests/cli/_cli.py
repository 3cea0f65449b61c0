"""Running the real ``txn-broker`` console script in a subprocess, with a backend's env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TXN_BROKER = Path(sys.executable).with_name("txn-broker")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def jsonl(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def cli_env(backend: Any, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXN_BROKER_")}
    env.update(backend.env if backend is not None else {})
    env.update(extra)
    return env


def run(backend: Any, *args: str, expect: int | None = 0, stdin: str | None = None,
        env: dict[str, str] | None = None, timeout: float = 300) -> Result:
    """Run ``txn-broker ARGS``; assert the exit code (unless ``expect`` is None) and that
    no traceback leaked without --debug."""
    proc = subprocess.run([str(TXN_BROKER), *args], env=env or cli_env(backend), input=stdin,
                          capture_output=True, text=True, timeout=timeout)
    result = Result(proc.returncode, proc.stdout, proc.stderr)
    if expect is not None:
        assert proc.returncode == expect, (
            f"txn-broker {' '.join(args)} exited {proc.returncode}, expected {expect}\n"
            f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")
    if "--debug" not in args:
        assert "Traceback" not in proc.stderr, proc.stderr
    return result


def run_json(backend: Any, *args: str, expect: int = 0, **kwargs: Any) -> Any:
    return run(backend, "--json", *args, expect=expect, **kwargs).json()


def error_line(result: Result) -> str:
    """The single ``error: ...`` line a failed command prints."""
    lines = [ln for ln in result.err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one error line, got: {result.err!r}"
    assert lines[0].startswith(("error: ", "txn-broker: error: ")), lines[0]
    return lines[0]
