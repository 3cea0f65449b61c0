"""A test stage: copy the orders of ``test_orders`` to ``test_orders_copy``; on try 1 it
fails after writing its output into the transaction (so that transaction aborts)."""

from __future__ import annotations

from typing import Any


def run(spark: Any, stage: Any, try_number: str = "1", **_: Any) -> None:
    stage.write(stage.read().select("order_id", "amount", "day"), topic="test_orders_copy")
    if str(try_number) == "1":
        raise RuntimeError("injected: the stage failed after writing its output")
