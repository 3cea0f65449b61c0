"""Who may use the Transactions page, and protection of its one write (abort).

Authentication is Airflow's own: :func:`airflow.api_fastapi.core_api.security.get_user`
reads the JWT from ``Authorization: Bearer`` or from the ``_token`` cookie the Airflow UI
sets at login (also sent by the page when it is shown in the UI's iframe), and refuses
anything else with 401 or 403. The plugin's FastAPI app declares it as an app-level
dependency, so no route of the plugin (pages, API, static files) runs without a user;
FastAPI apps mounted by plugins get no protection from Airflow otherwise.

Authorization goes through the configured auth manager:

* reading: the user may view plugins (``AccessView.PLUGINS``: every role of the simple
  auth manager, FAB's Viewer and up), the permission Airflow itself needs to list the
  page in its navigation;
* abort: the user may edit (``PUT``) the DAG the transaction belongs to; when the id
  cannot be attributed to a DAG the user can see, the user must be allowed to edit all
  DAGs.

Cross-site request forgery: the abort POST must carry ``X-CSRF-Token``, a token signed
with Airflow's ``[api] secret_key`` and bound to the user and a time window, obtained
from ``GET /api/session`` (another site cannot read that answer, nor set a custom
header without a CORS preflight that this app never grants). Requests with an
``Origin`` (or ``Sec-Fetch-Site``) from another origin are refused as well.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any
from urllib.parse import urlsplit

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, DagDetails
from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, HTTPException, Request, status

log = logging.getLogger(__name__)

CSRF_HEADER = "X-CSRF-Token"
#: how long a CSRF token stays valid; the page fetches a fresh one for every abort
CSRF_MAX_AGE_S = 2 * 3600
_CSRF_SALT = "txn-broker-ui-csrf"


async def require_viewer(request: Request, user: Annotated[BaseUser, Depends(get_user)]) -> BaseUser:
    """The app-level dependency: an authenticated user who may view plugins (else 401/403)."""
    if not get_auth_manager().is_authorized_view(access_view=AccessView.PLUGINS, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden: this user may not view plugin pages")
    request.state.txn_ui_user = user
    return user


UserDep = Annotated[BaseUser, Depends(require_viewer)]


def user_label(user: BaseUser) -> str:
    return str(user.get_name() or user.get_id())


def visible_dag_ids(user: BaseUser) -> set[str]:
    """The DAG ids the user may read (the auth manager's answer, from Airflow's own API)."""
    try:
        return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))
    except Exception:  # a broken metadata database must not take the broker's page down
        log.warning("could not list the DAGs of user %s; attributing transactions by name only",
                    user_label(user), exc_info=True)
        return set()


def _team_name(dag_id: str) -> str | None:
    from airflow.configuration import conf

    if not conf.getboolean("core", "multi_team", fallback=False):
        return None
    from airflow.models.dag import DagModel

    return DagModel.get_team_name(dag_id)


def may_abort(user: BaseUser, dag_id: str | None, dag_known: bool) -> bool:
    """Whether ``user`` may abort a transaction of ``dag_id``: edit permission on that DAG,
    or on all DAGs when the DAG is not one the user can see."""
    manager = get_auth_manager()
    if dag_id and dag_known:
        details = DagDetails(id=dag_id, team_name=_team_name(dag_id))
        return bool(manager.is_authorized_dag(method="PUT", details=details, user=user))
    return bool(manager.is_authorized_dag(method="PUT", user=user))


# -- CSRF --------------------------------------------------------------------------------


def _serializer() -> Any:
    from airflow.configuration import conf
    from itsdangerous import URLSafeTimedSerializer

    secret = conf.get("api", "secret_key", fallback="") or conf.get("api_auth", "jwt_secret", fallback="")
    if not secret:
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, "[api] secret_key is not configured")
    return URLSafeTimedSerializer(secret, salt=_CSRF_SALT)


def csrf_token(user: BaseUser) -> str:
    """A token for ``user``'s write requests, valid for :data:`CSRF_MAX_AGE_S`."""
    return str(_serializer().dumps({"user": str(user.get_id())}))


def _same_origin(request: Request, origin: str) -> bool:
    from airflow.configuration import conf

    allowed = {f"{request.url.scheme}://{request.url.netloc}"}
    if base_url := conf.get("api", "base_url", fallback=""):
        parts = urlsplit(base_url)
        allowed.add(f"{parts.scheme}://{parts.netloc}")
    return origin.rstrip("/") in allowed


def check_csrf(request: Request, user: BaseUser) -> None:
    """Refuse (403) a write without a valid CSRF token for ``user``, or from another origin."""
    from itsdangerous import BadData

    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site and fetch_site not in ("same-origin", "none"):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "CSRF check failed: cross-site request")
    origin = request.headers.get("origin")
    if origin and not _same_origin(request, origin):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "CSRF check failed: request from another origin")
    token = request.headers.get(CSRF_HEADER)
    if not token:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"CSRF check failed: missing {CSRF_HEADER} header")
    try:
        data = _serializer().loads(token, max_age=CSRF_MAX_AGE_S)
    except BadData:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "CSRF check failed: invalid or expired token") from None
    if not isinstance(data, dict) or data.get("user") != str(user.get_id()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "CSRF check failed: token of another user")
