"""The program ``spark-submit`` runs for ``TransactionalSparkOperator(deploy="spark-submit")``:
the stage's Spark driver (see ``stage_runner.main``).

spark-submit puts this file's own directory first on ``sys.path``; replace it with the
plugins folder, so the package is imported as ``txn_broker_airflow`` and its modules are
not importable as top-level names.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])

from txn_broker_airflow.stage_runner import main  # noqa: E402

if __name__ == "__main__":
    main()
