"""The plugin's pages and JSON API on a real ``airflow api-server``: registration in
Airflow, authentication on every endpoint, the abort's permission and CSRF checks, the
broker data it answers (compared with the broker's own answers), escaping, and that no
credential ever appears in an answer."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
import requests
from ui_harness import (
    API_ABORT,
    COMMITTED,
    EVENT_PAYLOAD,
    EVENT_RUN_ID,
    GROUP,
    HANGING,
    MAPPED_ONGOING,
    ONGOING,
    XSS_ID,
    XSS_TASK_ID,
    AirflowUIServer,
    Seeded,
    UiBroker,
    seed_event_run,
)

pytestmark = [pytest.mark.ui, pytest.mark.integration]

PREFIX = "/txn-broker"
PAGES = ["/", "/topics", "/topics/orders", "/groups", f"/groups/{GROUP}", f"/transactions/{quote(COMMITTED)}",
         "/task-instance?dag_id=ui.pipeline&task_id=load_orders&map_index=%7BMAP_INDEX%7D",
         "/dag-run?dag_id=ui.pipeline&run_id=%7BRUN_ID%7D"]


class Client:
    """requests with an Airflow JWT, as a bearer token or as the UI's ``_token`` cookie."""

    def __init__(self, server: AirflowUIServer, user: str | None, *, cookie: bool = False) -> None:
        self.server = server
        self.session = requests.Session()
        if user is not None:
            token = server.token(user)
            if cookie:
                self.session.cookies.set("_token", token)
            else:
                self.session.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.session.get(self.server.url(PREFIX + path), timeout=60, allow_redirects=False, **kwargs)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return self.session.post(self.server.url(PREFIX + path), timeout=60, allow_redirects=False, **kwargs)

    def json(self, path: str) -> Any:
        response = self.get(path)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:500]}"
        return response.json()

    def abort(self, tid: str, csrf: str | None = None, **headers: str) -> requests.Response:
        if csrf is not None:
            headers["X-CSRF-Token"] = csrf
        return self.post(f"/api/transactions/{quote(tid, safe='')}/abort", headers=headers, json={})


@pytest.fixture(scope="module")
def admin(ui_server: AirflowUIServer) -> Client:
    return Client(ui_server, "admin")


@pytest.fixture(scope="module")
def viewer(ui_server: AirflowUIServer) -> Client:
    return Client(ui_server, "viewer")


def _rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["transactional_id"]: r for r in data["transactions"]}


def test_plugin_registers_app_nav_entry_and_task_instance_link(admin: Client) -> None:
    plugins = requests.get(admin.server.url("/api/v2/plugins"), headers=admin.session.headers, timeout=60).json()
    plugin = next(p for p in plugins["plugins"] if p["name"] == "txn_broker_airflow")
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == [PREFIX]
    views = {v["destination"]: v for v in plugin["external_views"]}
    assert views["nav"]["name"] == "Transactions" and views["nav"]["url_route"] == "transactions"
    assert views["nav"]["href"] == f"{PREFIX}/"
    ti = views["task_instance"]
    assert ti["href"].startswith(f"{PREFIX}/task-instance?") and "{DAG_ID}" in ti["href"] and "{TASK_ID}" in ti["href"]
    assert "{MAP_INDEX}" in ti["href"]
    run = views["dag_run"]  # the DAG run tab: which committed-records event started the run
    assert run["href"] == f"{PREFIX}/dag-run?dag_id={{DAG_ID}}&run_id={{RUN_ID}}" and run["name"] == "Events"


def _every_endpoint(admin: Client) -> list[tuple[str, str]]:
    """(method, path) of every API operation in the app's own OpenAPI document, path
    parameters filled in, plus the pages, a static file and the OpenAPI document."""
    spec = admin.json("/api/openapi.json")
    fill = {"{transactional_id}": quote(ONGOING), "{name}": "orders", "{group_id}": GROUP,
            "{dag_id}": "ui.pipeline"}
    endpoints = []
    for path, operations in spec["paths"].items():
        for placeholder, value in fill.items():
            path = path.replace(placeholder, value)
        assert "{" not in path, f"unfilled path parameter in {path}"
        if path.endswith("/task-instance"):
            path += "?dag_id=ui.pipeline&task_id=transform"
        endpoints += [(method.upper(), path.removeprefix(PREFIX)) for method in operations]
    assert {("GET", "/api/transactions"), ("POST", f"/api/transactions/{quote(ONGOING)}/abort"),
            ("GET", "/api/topics/orders"), ("GET", f"/api/groups/{GROUP}")} <= set(endpoints)
    return [*endpoints, *(("GET", p) for p in PAGES), ("GET", "/static/txn_ui.js"), ("GET", "/static/icon.svg"),
            ("GET", "/api/openapi.json")]


def test_every_endpoint_refuses_unauthenticated_requests(ui_server: AirflowUIServer, admin: Client,
                                                         ui_data: Seeded) -> None:
    endpoints = _every_endpoint(admin)
    anonymous = Client(ui_server, None)
    forged = requests.Session()
    forged.headers["Authorization"] = "Bearer not-a-jwt"
    bad_cookie = requests.Session()
    bad_cookie.cookies.set("_token", "not-a-jwt")
    for method, path in endpoints:
        for session in (anonymous.session, forged, bad_cookie):
            response = session.request(method, ui_server.url(PREFIX + path), timeout=60, allow_redirects=False,
                                       headers={"Accept": "application/json"})
            assert response.status_code in (401, 403), f"{method} {path}: {response.status_code}"
            assert "transactional_id" not in response.text
    # a browser asking for a page is sent to Airflow's login, and back afterwards
    for path in PAGES:
        response = anonymous.get(path, headers={"Accept": "text/html"})
        assert response.status_code == 303, path
        assert response.headers["location"].startswith("/auth/login?next="), response.headers["location"]
    assert ui_data.broker.describe_transaction(ONGOING).state == "Ongoing"  # the anonymous POSTs did nothing


def test_bearer_token_and_ui_cookie_both_authenticate(ui_server: AirflowUIServer) -> None:
    for client in (Client(ui_server, "viewer"), Client(ui_server, "viewer", cookie=True)):
        assert COMMITTED in _rows(client.json("/api/transactions"))
        page = client.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 200 and 'data-view="transactions"' in page.text
        assert client.get("/static/txn_ui.css").status_code == 200


def test_transactions_list_rows_and_filters(admin: Client, ui_data: Seeded) -> None:
    data = admin.json("/api/transactions")
    rows = _rows(data)
    committed = rows[COMMITTED]
    assert (committed["dag_id"], committed["task_id"], committed["dag_known"]) == ("ui.pipeline", "load_orders", True)
    assert committed["state"] == "CompleteCommit" and committed["outcome"] == "committed"
    assert (committed["partition_count"], committed["record_count"]) == (2, 8) and committed["size_bytes"] > 0
    assert committed["age_ms"] is None and not committed["hanging"]
    ongoing = rows[ONGOING]
    assert ongoing["state"] == "Ongoing" and ongoing["open"] and ongoing["outcome"] == "open"
    assert 0 <= ongoing["age_ms"] < ongoing["timeout_ms"] == 600_000 and not ongoing["hanging"]
    assert ongoing["producer_epoch"] == ui_data.broker.describe_transaction(ONGOING).producer_epoch
    mapped = rows[MAPPED_ONGOING]
    assert (mapped["dag_id"], mapped["task_id"], mapped["map_index"]) == ("ui.pipeline", "publish", 0)
    assert rows[HANGING]["hanging"] and data["hanging_count"] >= 1
    assert list(rows)[0] == HANGING  # hanging ones first
    assert rows[XSS_ID]["dag_id"] is None and rows[XSS_TASK_ID]["task_id"] == "<img src=x onerror=alert(2)>"
    assert "ui.pipeline" in data["dag_ids"]

    assert set(_rows(admin.json("/api/transactions?state=CompleteCommit"))) >= {COMMITTED, XSS_ID}
    assert ONGOING not in _rows(admin.json("/api/transactions?state=CompleteCommit"))
    assert set(_rows(admin.json("/api/transactions?q=TRANSFORM"))) == {ONGOING}
    assert XSS_ID not in _rows(admin.json("/api/transactions?dag_id=ui.pipeline"))
    assert set(_rows(admin.json("/api/transactions?hanging=true"))) == {HANGING}
    assert admin.get("/api/transactions?state=Finished").status_code == 400

    from txn_broker import state_sets

    assert admin.json("/api/states") == state_sets()  # the page's state filter and "open" come from here


def test_transaction_detail(admin: Client, viewer: Client, ui_data: Seeded) -> None:
    detail = admin.json(f"/api/transactions/{quote(COMMITTED)}")
    expected = ui_data.broker.describe_transaction(COMMITTED)
    assert [(p["topic"], p["partition"], p["first_offset"], p["last_offset"], p["marker"])
            for p in detail["partitions"]] == [
        (p.topic, p.partition, p.first_offset, p.last_offset, p.marker) for p in expected.partitions]
    assert [(p["first_offset"], p["last_offset"]) for p in detail["partitions"]] == [(0, 4), (0, 2)]
    assert detail["group_offsets"] == [{"group_id": GROUP, "topic": "payments", "partition": 0, "offset": 4}]
    assert len(detail["segments"]) == len(expected.segments) >= 2
    assert [h["to_state"] for h in detail["history"]][-3:] == ["Ongoing", "PrepareCommit", "CompleteCommit"]
    assert detail["can_abort"] is False and detail["outcome"] == "committed"

    assert admin.json(f"/api/transactions/{quote(ONGOING)}")["can_abort"] is True
    assert viewer.json(f"/api/transactions/{quote(ONGOING)}")["can_abort"] is False
    assert admin.json(f"/api/transactions/{quote(XSS_ID, safe='')}")["transactional_id"] == XSS_ID
    missing = admin.get("/api/transactions/no.such.id")
    assert missing.status_code == 404 and "no.such.id" in missing.json()["detail"]


def test_topic_and_group_views_match_the_broker(admin: Client, ui_data: Seeded) -> None:
    topic = admin.json("/api/topics/orders")
    expected = ui_data.broker.describe_topic("orders")
    assert [(p["partition"], p["high_watermark"], p["last_stable_offset"], p["segment_count"], p["size_bytes"])
            for p in topic["partitions"]] == [
        (p.partition, p.high_watermark, p.last_stable_offset, p.segment_count, int(p.size_bytes))
        for p in expected.partitions]
    p0 = topic["partitions"][0]
    assert p0["last_stable_offset"] < p0["high_watermark"]  # held back by the open transaction
    assert p0["lso_lag"] == p0["high_watermark"] - p0["last_stable_offset"]
    assert ONGOING in {h["transactional_id"] for h in topic["open_transactions"]}
    assert [f["name"] for f in topic["schema"]] == ["order_id", "amount"]
    listed = {t["name"]: t for t in admin.json("/api/topics")["topics"]}
    assert listed["orders"]["lso_lag"] == sum(p["lso_lag"] for p in topic["partitions"]) > 0
    assert admin.get("/api/topics/nope").status_code == 404

    group = admin.json(f"/api/groups/{GROUP}")
    expected_group = ui_data.broker.describe_group(GROUP)
    assert [(p["topic"], p["partition"], p["committed_offset"], p["lag"]) for p in group["partitions"]] == [
        (p.topic, p.partition, p.committed_offset, p.lag) for p in expected_group.partitions]
    assert group["partitions"][0]["committed_offset"] == 4
    assert GROUP in {g["group_id"] for g in admin.json("/api/groups")["groups"]}


def test_task_instance_link_resolves_the_default_transactional_id(admin: Client) -> None:
    unmapped = admin.json("/api/task-instance?dag_id=ui.pipeline&task_id=load_orders&map_index=%7BMAP_INDEX%7D")
    assert (unmapped["transactional_id"], unmapped["exists"]) == (COMMITTED, True)
    mapped = admin.json("/api/task-instance?dag_id=ui.pipeline&task_id=publish&map_index=0")
    assert (mapped["transactional_id"], mapped["exists"]) == (MAPPED_ONGOING, True)
    whole = admin.json("/api/task-instance?dag_id=ui.pipeline&task_id=publish")
    assert not whole["exists"] and {MAPPED_ONGOING, API_ABORT} <= set(whole["candidates"])
    page = admin.get("/task-instance?dag_id=ui.pipeline&task_id=publish&map_index=%7BMAP_INDEX%7D")
    assert page.status_code == 200 and 'data-task-id="publish"' in page.text


def test_dag_run_tab_shows_the_event_that_started_the_run(ui_server: AirflowUIServer, admin: Client,
                                                         viewer: Client) -> None:
    seed_event_run(ui_server)
    one = viewer.json(f"/api/dag-runs/ui.pipeline/events?run_id={EVENT_RUN_ID}")
    assert [r["run_id"] for r in one["runs"]] == [EVENT_RUN_ID]
    (event,) = one["runs"][0]["events"]
    assert one["runs"][0]["event_ids"] == [EVENT_PAYLOAD["event_id"]] and event["from_trigger"] is True
    assert (event["group_id"], event["ranges"], event["offsets"]) == (
        GROUP, EVENT_PAYLOAD["ranges"], EVENT_PAYLOAD["offsets"])
    assert event["asset_uri"] == f"txn-committed://txn_broker_default/orders/{GROUP}"
    # the run's tasks and the transactional ids that processed its ranges
    assert COMMITTED in one["transactional_ids"]
    assert EVENT_RUN_ID in {r["run_id"] for r in admin.json("/api/dag-runs/ui.pipeline/events")["runs"]}
    assert admin.get("/api/dag-runs/ui.pipeline/events?run_id=nope").status_code == 404
    assert admin.get("/api/dag-runs/no.such.dag/events").status_code == 404
    page = admin.get(f"/dag-run?dag_id=ui.pipeline&run_id={EVENT_RUN_ID}")
    assert page.status_code == 200 and 'data-view="dag_run"' in page.text and EVENT_RUN_ID in page.text


def test_abort_needs_dag_edit_permission_and_a_csrf_token(ui_server: AirflowUIServer, admin: Client, viewer: Client,
                                                          ui_data: Seeded) -> None:
    from txn_broker.errors import ProducerFencedError

    viewer_token = viewer.json("/api/session")["csrf_token"]
    admin_token = admin.json("/api/session")["csrf_token"]

    refused = viewer.abort(API_ABORT, viewer_token)
    assert refused.status_code == 403 and "edit" in refused.json()["detail"]
    for response in (
        admin.abort(API_ABORT),                                              # no token
        admin.abort(API_ABORT, "forged-token"),                              # not signed by the server
        admin.abort(API_ABORT, viewer_token),                                # another user's token
        admin.abort(API_ABORT, admin_token, Origin="http://evil.example"),   # posted from another site
        admin.abort(API_ABORT, admin_token, **{"Sec-Fetch-Site": "cross-site"}),
    ):
        assert response.status_code == 403, response.text
        assert "CSRF" in response.json()["detail"]
    form = admin.session.post(ui_server.url(f"{PREFIX}/api/transactions/{quote(API_ABORT)}/abort"),
                              data={"confirm": "1"}, timeout=60)  # what a cross-site HTML form can send
    assert form.status_code == 403
    assert ui_data.broker.describe_transaction(API_ABORT).state == "Ongoing"

    done = admin.abort(API_ABORT, admin_token, Origin=ui_server.base_url)
    assert done.status_code == 200, done.text
    result = done.json()
    assert "abort" in result["action"] and result["transaction"]["state"] == "CompleteAbort"
    assert ui_data.broker.describe_transaction(API_ABORT).state == "CompleteAbort"
    with pytest.raises(ProducerFencedError):  # the producer that held it is fenced
        ui_data.commit(API_ABORT)
    again = admin.abort(API_ABORT, admin_token)
    assert again.status_code == 409 and "no open transaction" in again.json()["detail"]


def test_pages_escape_ids_and_send_a_strict_csp(admin: Client) -> None:
    page = admin.get(f"/transactions/{quote(XSS_ID, safe='')}")
    assert page.status_code == 200
    assert "<script>alert" not in page.text
    assert "&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt;" in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'self'" in csp and "'unsafe-inline'" not in csp
    ti = admin.get("/task-instance?dag_id=%3Cb%3Ex&task_id=%22%3E%3Cscript%3E")
    assert "<script>" not in ti.text and "<b>x" not in ti.text


def test_no_credential_in_any_answer(admin: Client, ui_broker: UiBroker, ui_data: Seeded) -> None:
    session = admin.json("/api/session")
    assert "***" in session["broker"]["database"] and ui_broker.db_password not in session["broker"]["database"]
    assert session["broker"]["database"].startswith("postgresql")
    bodies = [admin.get(path).text for _, path in _every_endpoint(admin) if _ == "GET"]
    bodies += [admin.get(f"/api/transactions/{quote(t, safe='')}").text for t in (COMMITTED, ONGOING, HANGING)]
    for secret in ui_broker.secrets:
        assert secret not in session["broker"]["storage"]
        for body in bodies:
            assert secret not in body
