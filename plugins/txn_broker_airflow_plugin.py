"""The Airflow plugin of txn_broker: registers the failure listener.

Airflow imports every ``.py`` file of the plugins folder as a module; this is the only one
of the ``txn_broker_airflow`` layer it should (``txn_broker_airflow/.airflowignore`` keeps
it out of the package itself). Operators, sensors and the hook need no registration:
DAGs import them from ``txn_broker_airflow``, and the connection type comes from the
``txn-broker`` provider entry point (``txn_broker/airflow_provider.py``).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from txn_broker_airflow.listeners import failure_listener
from txn_broker_airflow.ui import EXTERNAL_VIEWS, FASTAPI_APPS


class TxnBrokerAirflowPlugin(AirflowPlugin):
    name = "txn_broker_airflow"
    listeners = [failure_listener]
    # the Transactions page (txn_broker_airflow/ui): its app, its navigation entry and
    # the task-instance tab; built lazily, so other Airflow processes import nothing heavy
    fastapi_apps = FASTAPI_APPS
    external_views = EXTERNAL_VIEWS
