"""The HTML pages: server-rendered shells (Jinja2, autoescaped) that ``static/txn_ui.js``
fills from the JSON API. The only values rendered into HTML are the signed-in user's name
and the id, topic or group in the URL, all escaped by Jinja2's autoescape; everything the
broker answers is put into the DOM by the script with ``textContent``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import jinja2
from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from .security import UserDep, user_label

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
#: refresh interval of the pages' data, in milliseconds
REFRESH_MS = 5000

#: autoescape for every template, whatever its file name (select_autoescape would only
#: cover .html/.xml)
templates = Jinja2Templates(env=jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                                   autoescape=True))
router = APIRouter(include_in_schema=False)

_STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
#: name -> path of every file shipped in static/ (nothing else is ever served)
STATIC_FILES = {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in _STATIC_TYPES}
#: a short hash of the static files, appended to their URLs so a new release is not cached
STATIC_VERSION = hashlib.sha256(b"".join(p.read_bytes() for _, p in sorted(STATIC_FILES.items()))).hexdigest()[:12]


def base_path(request: Request) -> str:
    """Where this app is mounted (``/txn-broker``, below Airflow's base URL if it has one)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _render(request: Request, user: Any, view: str, title: str, **data: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, f"{view}.html", {
        "base": base_path(request), "view": view, "title": title, "user": user_label(user),
        "refresh_ms": REFRESH_MS, "static_version": STATIC_VERSION, **data,
    })


@router.get("/", response_class=HTMLResponse)
def transactions_page(request: Request, user: UserDep) -> HTMLResponse:
    return _render(request, user, "transactions", "Transactions")


@router.get("/transactions/{transactional_id:path}", response_class=HTMLResponse)
def transaction_page(request: Request, transactional_id: str, user: UserDep) -> HTMLResponse:
    return _render(request, user, "transaction", transactional_id, key=transactional_id)


@router.get("/task-instance", response_class=HTMLResponse)
def task_instance_page(request: Request, user: UserDep, dag_id: str = "", task_id: str = "",
                       map_index: str = "") -> HTMLResponse:
    return _render(request, user, "task_instance", f"{dag_id}.{task_id}", dag_id=dag_id, task_id=task_id,
                   map_index=map_index)


@router.get("/dag-run", response_class=HTMLResponse)
def dag_run_page(request: Request, user: UserDep, dag_id: str = "", run_id: str = "") -> HTMLResponse:
    return _render(request, user, "dag_run", f"{dag_id} {run_id}".strip(), dag_id=dag_id, run_id=run_id)


@router.get("/topics", response_class=HTMLResponse)
def topics_page(request: Request, user: UserDep) -> HTMLResponse:
    return _render(request, user, "topics", "Topics")


@router.get("/topics/{name}", response_class=HTMLResponse)
def topic_page(request: Request, name: str, user: UserDep) -> HTMLResponse:
    return _render(request, user, "topic", name, key=name)


@router.get("/groups", response_class=HTMLResponse)
def groups_page(request: Request, user: UserDep) -> HTMLResponse:
    return _render(request, user, "groups", "Consumer groups")


@router.get("/groups/{group_id:path}", response_class=HTMLResponse)
def group_page(request: Request, group_id: str, user: UserDep) -> HTMLResponse:
    return _render(request, user, "group", group_id, key=group_id)


@router.get("/static/{name}")
def static_file(name: str, user: UserDep) -> FileResponse:
    path = STATIC_FILES.get(name)
    if path is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "Not Found")
    return FileResponse(path, media_type=_STATIC_TYPES[path.suffix],
                        headers={"Cache-Control": "private, max-age=86400"})
