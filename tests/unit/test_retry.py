"""The one retry policy (txn_broker.retry): a time budget, and nested layers that make a
single attempt while an outer one decides."""

from __future__ import annotations

import threading
import time

import pytest

from txn_broker.errors import DatabaseUnavailableError, InvalidInputError
from txn_broker.retry import retrying


class Flaky:
    """Fails with ``error`` the first ``failures`` calls (all of them when None)."""

    def __init__(self, error: Exception, failures: int | None = None) -> None:
        self.error = error
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures is None or self.calls <= self.failures:
            raise self.error
        return "ok"


def test_a_retriable_error_is_retried_until_the_call_succeeds() -> None:
    call = Flaky(DatabaseUnavailableError("down"), failures=3)
    assert retrying(call, 5_000) == "ok"
    assert call.calls == 4


def test_other_errors_are_raised_at_once() -> None:
    call = Flaky(InvalidInputError("bad"))
    with pytest.raises(InvalidInputError):
        retrying(call, 5_000)
    assert call.calls == 1


def test_the_budget_bounds_the_total_wait() -> None:
    call = Flaky(DatabaseUnavailableError("down"))
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError):
        retrying(call, 1_000)
    elapsed = time.monotonic() - started
    assert elapsed <= 1.0 + 0.2  # the last wait that would overrun the budget is not taken
    assert call.calls >= 5  # backoff starts at 10 ms
    zero = Flaky(DatabaseUnavailableError("down"))
    with pytest.raises(DatabaseUnavailableError):
        retrying(zero, 0)
    assert zero.calls == 1  # a budget of 0: one attempt


def test_nested_layers_make_one_attempt_while_the_outer_one_decides() -> None:
    inner_calls = Flaky(DatabaseUnavailableError("down"))
    outer_attempts = []

    def outer() -> str:
        outer_attempts.append(1)
        return retrying(inner_calls, 60_000)  # would retry for a minute on its own

    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError):
        retrying(outer, 500)
    assert time.monotonic() - started < 1.5  # the outer budget decided, not the inner one
    assert inner_calls.calls == len(outer_attempts)  # never attempts multiplied by attempts
    assert retrying(lambda: retrying(lambda: "x")) == "x"


def test_the_outer_scope_is_per_thread() -> None:
    """A thread started inside a retrying call (an upload pool) retries on its own."""
    results = []

    def in_thread() -> None:
        call = Flaky(DatabaseUnavailableError("down"), failures=2)
        results.append((retrying(call, 5_000), call.calls))

    def outer() -> None:
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()

    retrying(outer, 5_000)
    assert results == [("ok", 3)]


def test_a_custom_rule_decides_what_is_transient() -> None:
    call = Flaky(TimeoutError("slow"), failures=2)
    assert retrying(call, 5_000, retriable=lambda e: isinstance(e, TimeoutError)) == "ok"
    with pytest.raises(TimeoutError):
        retrying(Flaky(TimeoutError("slow"), failures=2), 5_000)
