"""The Airflow plugin of txn_broker: the failure listener and the Transactions page.

Installed (``pip install 'txn-broker[airflow]'``), Airflow finds it through the
``airflow.plugins`` entry point of the ``txn-broker`` distribution (``pyproject.toml``).
People who mount the repository's ``plugins/`` as the plugins folder (the compose stack)
get it from ``plugins/txn_broker_airflow_plugin.py``, which imports this class.

When both are present, Airflow's plugins manager would load the folder's copy first and
then find the entry point's plugin of the same name, skip it and record "already
registered" as a plugin import error. So the folder file defers: it exposes the class only
when no installed distribution declares it as an ``airflow.plugins`` entry point
(:func:`registered_by_entry_point`). Either way the plugin, and with it the listener, is
registered exactly once.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from airflow.plugins_manager import AirflowPlugin

from .listeners import failure_listener
from .provider_info import PLUGIN_NAME
from .ui import EXTERNAL_VIEWS, FASTAPI_APPS

#: Airflow's entry point group for plugins of installed distributions
ENTRY_POINT_GROUP = "airflow.plugins"


class TxnBrokerAirflowPlugin(AirflowPlugin):
    name = PLUGIN_NAME
    listeners = [failure_listener]
    # the Transactions page (txn_broker_airflow/ui): its app, its navigation entry and
    # the task-instance tab; built lazily, so other Airflow processes import nothing heavy
    fastapi_apps = FASTAPI_APPS
    external_views = EXTERNAL_VIEWS


def registered_by_entry_point() -> bool:
    """Whether an installed distribution registers this plugin through the
    ``airflow.plugins`` entry point (then the plugins-folder file must not register it too)."""
    target = f"{__name__}:{TxnBrokerAirflowPlugin.__name__}"
    return any(ep.value.replace(" ", "") == target for ep in entry_points(group=ENTRY_POINT_GROUP))
