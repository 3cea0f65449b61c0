"""A test stage: copy ``stage_in`` to ``stage_out`` (doubling ``n``), with injected trouble.

* ``TXN_TEST_FAIL_FIRST_TRY=1``: on try 1, fail after the output was written into the
  transaction (its segments uploaded and registered), before the commit;
* ``TXN_TEST_PAUSE_DIR=dir``: after writing, create ``dir/reached`` and wait until
  ``dir/release`` exists, then return (so the commit happens after the release): the
  zombie test runs a second instance of the task meanwhile.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def run(spark: Any, stage: Any, try_number: str = "1", **_: Any) -> None:
    from pyspark.sql import functions as F

    df = stage.read()
    out = df.select(F.col("n"), (F.col("n") * 2).alias("doubled"), F.col("label"))
    stage.write(out, topic="stage_out")
    if os.environ.get("TXN_TEST_FAIL_FIRST_TRY") and str(try_number) == "1":
        raise RuntimeError("injected: the stage failed after writing its output")
    pause = os.environ.get("TXN_TEST_PAUSE_DIR")
    if pause:
        (Path(pause) / "reached").write_text(str(os.getpid()))
        deadline = time.monotonic() + 300
        while not (Path(pause) / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the test never released this stage")
            time.sleep(0.1)
