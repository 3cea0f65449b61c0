"""The **Transactions** page of the Airflow UI: a FastAPI app mounted by the plugin.

* ``app.py``: the app (pages, JSON API, static files), every route behind Airflow's auth;
* ``api.py``: the JSON API under ``/txn-broker/api``;
* ``pages.py``, ``templates/``, ``static/``: server-rendered page shells plus one vanilla
  JS file that reads the API, renders with ``textContent`` and refreshes on its own;
* ``security.py``: authentication, per-DAG abort permission, CSRF protection;
* ``views.py``: broker answers as JSON-ready dicts; ``broker_source.py``: the broker.

This module is imported by every Airflow process that loads plugins (scheduler, workers,
DAG processor), so it imports nothing heavy: the FastAPI app is built by
:class:`LazyApp` on the first request the api-server routes to it.
"""

from __future__ import annotations

from typing import Any

URL_PREFIX = "/txn-broker"


class LazyApp:
    """An ASGI app that builds ``txn_broker_airflow.ui.app.create_app()`` on first use."""

    def __init__(self) -> None:
        self._app: Any = None

    @property
    def app(self) -> Any:
        if self._app is None:
            from .app import create_app

            self._app = create_app()
        return self._app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


#: ``AirflowPlugin.fastapi_apps``
FASTAPI_APPS = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "txn_broker transactions"}]

#: ``AirflowPlugin.external_views``: the navigation entry, the task-instance tab and the DAG
#: run tab (the committed-records events that started the run). The UI replaces ``{DAG_ID}``,
#: ``{RUN_ID}``, ``{TASK_ID}`` and (for mapped task instances) ``{MAP_INDEX}``.
EXTERNAL_VIEWS = [
    {
        "name": "Transactions",
        "href": f"{URL_PREFIX}/",
        "destination": "nav",
        "url_route": "transactions",
        "icon": f"{URL_PREFIX}/static/icon.svg",
        "nav_top_level": True,
    },
    {
        "name": "Transaction",
        "href": f"{URL_PREFIX}/task-instance?dag_id={{DAG_ID}}&task_id={{TASK_ID}}&map_index={{MAP_INDEX}}",
        "destination": "task_instance",
        "url_route": "transaction",
        "icon": f"{URL_PREFIX}/static/icon.svg",
    },
    {
        "name": "Events",
        "href": f"{URL_PREFIX}/dag-run?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
        "destination": "dag_run",
        "url_route": "events",
        "icon": f"{URL_PREFIX}/static/icon.svg",
    },
]
