"""The txn_broker Airflow plugin, for deployments that mount this ``plugins/`` folder as
Airflow's plugins folder (the compose stack) instead of, or as well as, installing the
``txn-broker`` package.

Airflow imports every ``.py`` file of the plugins folder as a module and registers the
AirflowPlugin classes it finds in it; this is the only file of the ``txn_broker_airflow``
layer it should import (``txn_broker_airflow/.airflowignore`` keeps the package itself out
of that scan). The plugin class lives in ``txn_broker_airflow/plugin.py``. When the
installed package registers it through its ``airflow.plugins`` entry point, this file
exposes nothing, so the plugin and its listener are registered once (see that module).
"""

from __future__ import annotations

from txn_broker_airflow import plugin as _plugin

if not _plugin.registered_by_entry_point():
    TxnBrokerAirflowPlugin = _plugin.TxnBrokerAirflowPlugin
