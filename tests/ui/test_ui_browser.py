"""The Transactions page in real headless Chromium (Debian's ``chromium``, driven by
Playwright with ``executable_path``; never a downloaded browser) against a real
``airflow api-server``: sign in through Airflow's login page, open **Transactions** from
the UI's navigation, see a committed and an ongoing transaction, watch a topic's last
stable offset move on its own, abort the ongoing transaction through the confirmation
dialog, open a task instance's transaction from its task-instance tab, and check that
HTML in transactional ids is shown as text. Saves ``docs/ui-transactions.png`` and
``docs/ui-topic.png``. The Topics
and Consumer groups pages show the Prometheus exporter's offsets and lag, and the Iceberg
figures of ``txn-broker iceberg status``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from ui_harness import (
    COMMITTED,
    EVENT_PAYLOAD,
    EVENT_RUN_ID,
    GROUP,
    HANGING,
    LAKE,
    LAKE_GROUP,
    MAPPED_ONGOING,
    ONGOING,
    REPO,
    USERS,
    XSS_ID,
    XSS_TASK_ID,
    AirflowUIServer,
    Seeded,
    seed_event_run,
)

pytestmark = [pytest.mark.ui, pytest.mark.integration]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
SCREENSHOT = REPO / "docs" / "ui-transactions.png"
TOPIC_SCREENSHOT = REPO / "docs" / "ui-topic.png"
WAIT_MS = 30_000  # the machine is shared: generous deadlines, never fixed sleeps


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make install does)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def signed_in(browser, ui_server: AirflowUIServer) -> dict:  # type: ignore[no-untyped-def]
    """Sign in once through Airflow's login form; the tests reuse the session's cookies."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(ui_server.url("/"))
    page.wait_for_url(re.compile(r".*/auth/login.*"), timeout=WAIT_MS)
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(USERS["admin"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/" not in url, timeout=WAIT_MS)
    state = context.storage_state()
    context.close()
    assert any(c["name"] == "_token" for c in state["cookies"])
    return state


@pytest.fixture
def page(browser, signed_in: dict, ui_server: AirflowUIServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A signed-in admin's page on the Airflow UI, with a record of dialogs and script
    errors; a screenshot of a failure goes to the test's tmp_path."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme="light",
                                  locale="en-US", timezone_id="UTC", storage_state=signed_in)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.dialogs = []
    page.errors = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.goto(ui_server.url("/"))
    yield page
    if getattr(page, "failed", False):
        page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
        print(f"screenshot of the failure: {tmp_path / 'failure.png'}")
    context.close()


def _frame(page):  # type: ignore[no-untyped-def]
    return page.frame_locator("iframe[title='Transactions']")


def _tab(frame, name: str):  # type: ignore[no-untyped-def]
    return frame.locator("nav.tabs").get_by_role("link", name=name, exact=True)


def _row(frame, tid: str):  # type: ignore[no-untyped-def]
    return frame.locator(f"tr[data-transactional-id='{tid}']")


def test_transactions_page_in_the_airflow_ui(page, ui_server: AirflowUIServer, ui_data: Seeded) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    from txn_broker.errors import ProducerFencedError

    broker = ui_data.broker
    try:
        # the navigation entry opens the page inside the Airflow UI
        page.get_by_role("link", name="Transactions").first.click()
        page.wait_for_url(re.compile(r".*/plugin/transactions.*"))
        frame = _frame(page)
        expect(_row(frame, COMMITTED).locator("[data-state]")).to_have_text("CompleteCommit")
        expect(_row(frame, COMMITTED)).to_contain_text("ui.pipeline")
        expect(_row(frame, COMMITTED)).to_contain_text("committed")
        expect(_row(frame, ONGOING).locator("[data-state]")).to_have_text("Ongoing")
        expect(_row(frame, HANGING)).to_have_class(re.compile(r"\brow-hanging\b"))
        expect(_row(frame, HANGING)).to_contain_text("hanging")
        # HTML in ids is text: shown literally, never parsed into elements
        expect(frame.get_by_role("link", name=XSS_ID, exact=True)).to_be_visible()
        expect(frame.get_by_text("<img src=x onerror=alert(2)>", exact=True)).to_be_visible()
        assert frame.locator("img[src='x']").count() == 0
        assert frame.locator("script").count() == 1

        # filters
        frame.locator("#filter-q").fill("transform")
        expect(frame.locator("#transactions-body tr")).to_have_count(1)
        expect(_row(frame, ONGOING)).to_be_visible()
        frame.locator("#filter-clear").click()
        expect(_row(frame, COMMITTED)).to_be_visible()
        # the state filter offers the states the API serves (GET /states), not a list of its own
        expect(frame.locator("#filter-state option[value='PrepareEpochFence']")).to_have_count(1)
        expect(frame.locator("#filter-state option[value='Dead']")).to_have_count(0)
        frame.locator("#filter-state").select_option("open")
        expect(_row(frame, ONGOING)).to_be_visible()
        expect(_row(frame, COMMITTED)).to_have_count(0)
        frame.locator("#filter-clear").click()
        expect(_row(frame, COMMITTED)).to_be_visible()

        # a topic: its last stable offset is held back by the open transactions, and moves
        # on its own (auto-refresh) when one of them commits
        _tab(frame, "Topics").click()
        frame.get_by_role("link", name="orders", exact=True).click()
        lso = [frame.locator(f"#topic-partitions tr[data-partition='{p}'] [data-field=last_stable_offset]")
               for p in (0, 1)]
        before = broker.describe_topic("orders").partitions
        assert before[0].last_stable_offset < before[0].high_watermark
        expect(lso[0]).to_have_text(f"{before[0].last_stable_offset:,}")
        expect(lso[1]).to_have_text(f"{before[1].last_stable_offset:,}")
        ui_data.commit(MAPPED_ONGOING)
        moved = broker.describe_topic("orders").partitions[1].last_stable_offset
        assert moved > before[1].last_stable_offset
        expect(lso[1]).to_have_text(f"{moved:,}")  # no reload: the page refreshed itself

        # abort the ongoing transaction: from the topic's open transactions, confirm, see it aborted
        frame.locator("#topic-holders").get_by_role("link", name=ONGOING).click()
        abort = frame.locator("#abort")
        expect(abort).to_be_enabled()
        abort.click()
        dialog = frame.locator("#confirm-abort")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text(ONGOING)
        frame.locator("#confirm-cancel").click()  # cancelling does nothing
        expect(dialog).to_be_hidden()
        assert broker.describe_transaction(ONGOING).state == "Ongoing"
        abort.click()
        frame.locator("#confirm-ok").click()
        expect(frame.locator("#facts .fact").first.locator("[data-state]")).to_have_text("CompleteAbort")
        expect(frame.locator("#notice")).to_contain_text("fenced")
        expect(abort).to_be_hidden()
        expect(frame.locator("#timeline")).to_contain_text("aborted by an administrator")
        assert broker.describe_transaction(ONGOING).state == "CompleteAbort"
        with pytest.raises(ProducerFencedError):
            ui_data.commit(ONGOING)

        # back on the topic, partition 0's last stable offset has caught up with its HW
        _tab(frame, "Topics").click()
        # the topics list, not the transaction page still shown while the tab loads
        frame.locator("#topics-body").get_by_role("link", name="orders", exact=True).click()
        after = broker.describe_topic("orders").partitions[0]
        assert after.last_stable_offset == after.high_watermark > before[0].last_stable_offset
        expect(lso[0]).to_have_text(f"{after.last_stable_offset:,}")

        # the list shows the new state; this is the screenshot of the docs
        _tab(frame, "Transactions").click()
        expect(_row(frame, ONGOING).locator("[data-state]")).to_have_text("CompleteAbort")
        expect(_row(frame, HANGING)).to_be_visible()
        page.mouse.move(0, 0)
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT))
        assert page.dialogs == [], page.dialogs
        assert not [e for e in page.errors if "txn" in e or "Uncaught" in e], page.errors
    except BaseException:
        page.failed = True
        raise


def test_task_instance_tab_opens_its_transaction(page, ui_server: AirflowUIServer, ui_data: Seeded) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    try:
        token = ui_server.token("admin")
        run = requests.post(ui_server.url("/api/v2/dags/ui.pipeline/dagRuns"), json={"logical_date": None},
                            headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert run.status_code == 200, run.text
        run_id = run.json()["dag_run_id"]
        page.goto(ui_server.url(f"/dags/ui.pipeline/runs/{quote(run_id, safe='')}/tasks/load_orders"))
        page.get_by_role("link", name="Transaction", exact=True).click()  # the task instance's plugin tab
        page.wait_for_url(re.compile(r".*/tasks/load_orders/plugin/transaction$"))
        frame = page.frame_locator("iframe[title='Transaction']")
        expect(frame.locator("h1")).to_have_text(COMMITTED)
        expect(frame.locator("#facts [data-state]").first).to_have_text("CompleteCommit")
        expect(frame.locator("#partitions")).to_contain_text("orders")
        expect(frame.locator("#group-offsets")).to_contain_text("orders-loader")
    except BaseException:
        page.failed = True
        raise


def test_dag_run_tab_shows_which_event_started_the_run(page, ui_server: AirflowUIServer, ui_data: Seeded) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    try:
        seed_event_run(ui_server)
        page.goto(ui_server.url(f"/dags/ui.pipeline/runs/{quote(EVENT_RUN_ID, safe='')}"))
        page.get_by_role("link", name="Events", exact=True).click()  # the DAG run's plugin tab
        page.wait_for_url(re.compile(r".*/plugin/events$"))
        frame = page.frame_locator("iframe[title='Events']")
        row = frame.locator(f"#run-events tr[data-event-id='{EVENT_PAYLOAD['event_id']}']")
        expect(row).to_contain_text(EVENT_RUN_ID)
        expect(row).to_contain_text("orders-0 [3, 10)")
        expect(row).to_contain_text("orders-1 [0, 4)")
        expect(row.get_by_role("link", name="orders-loader")).to_be_visible()
        expect(frame.locator("#run-summary")).to_have_text("1 run(s), 1 started by committed-records events")
        expect(frame.locator("#run-transactions")).to_contain_text(COMMITTED)
        assert not page.errors, page.errors
    except BaseException:
        page.failed = True
        raise


def test_html_in_ids_never_runs_as_a_full_page(page, ui_server: AirflowUIServer, ui_data: Seeded) -> None:  # type: ignore[no-untyped-def]
    """Outside the UI's sandboxed iframe an injected alert() would open a dialog."""
    from playwright.sync_api import expect

    try:
        page.goto(ui_server.url("/txn-broker/?q=%3C"))
        expect(page.get_by_role("link", name=XSS_ID, exact=True)).to_be_visible()
        expect(page.get_by_text("<img src=x onerror=alert(2)>", exact=True)).to_be_visible()
        page.goto(ui_server.url(f"/txn-broker/transactions/{quote(XSS_TASK_ID, safe='')}"))
        expect(page.locator("h1")).to_have_text(XSS_TASK_ID)
        expect(page.locator("#facts [data-state]").first).to_have_text("CompleteCommit")
        expect(page.locator("#subtitle")).to_contain_text("<img src=x onerror=alert(2)>")
        page.goto(ui_server.url(f"/txn-broker/transactions/{quote(XSS_ID, safe='')}"))
        expect(page.locator("h1")).to_have_text(XSS_ID)
        expect(page.locator("#partitions")).to_contain_text("payments")
        assert page.locator("img[src='x']").count() == 0
        assert page.dialogs == [], page.dialogs
    except BaseException:
        page.failed = True
        raise


def _exported(broker) -> dict[tuple[str, tuple[str, ...]], float]:  # type: ignore[no-untyped-def]
    """What GET /metrics answers: {(metric, label values): value}."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from txn_broker.metrics import broker_registry

    samples = {}
    for family in text_string_to_metric_families(generate_latest(broker_registry(broker)).decode()):
        for sample in family.samples:
            labels = tuple(sample.labels[k] for k in ("group", "topic", "partition") if k in sample.labels)
            samples[(sample.name, labels)] = sample.value
    return samples


def test_topics_and_groups_show_the_exporters_figures(page, ui_server: AirflowUIServer, ui_data: Seeded) -> None:  # type: ignore[no-untyped-def]
    """An open transaction holds a last stable offset back, groups lag, an Iceberg table is
    behind: the pages show the exporter's figures and ``iceberg status``'s, and chart them.
    Ages grow while the test reads them: a shown age lies between the one read just before the
    page's last refresh (5 s) and the one read after it."""
    from playwright.sync_api import expect

    broker = ui_data.broker
    slack = 30.0  # seconds: the page's refresh interval on a busy machine
    try:
        metrics = _exported(broker)
        for topic in ("orders", "payments", LAKE):
            page.goto(ui_server.url(f"/txn-broker/topics/{topic}"))
            for n in range(len(broker.describe_topic(topic).partitions)):
                hw = int(metrics[("txn_broker_partition_high_watermark", (topic, str(n)))])
                lso = int(metrics[("txn_broker_partition_last_stable_offset", (topic, str(n)))])
                row = page.locator(f"#topic-partitions tr[data-partition='{n}']")
                expect(row.locator("[data-field=high_watermark]")).to_have_text(f"{hw:,}")
                expect(row.locator("[data-field=last_stable_offset]")).to_have_text(f"{lso:,}")
                gap = row.locator("[data-field=lso_lag]")
                expect(gap).to_contain_text(f"{hw - lso:,} records" if hw > lso else "none")
                bar = page.locator(f"#topic-lag-chart g[data-key='{topic}-{n}']")
                expect(bar).to_have_attribute("data-value", str(hw - lso))
        # the seeded open transaction on lake-1 (those on orders may be settled by earlier tests)
        hw, lso = (metrics[(name, (LAKE, "1"))] for name in ("txn_broker_partition_high_watermark",
                                                              "txn_broker_partition_last_stable_offset"))
        assert hw - lso == 2, (hw, lso)

        for group in (GROUP, LAKE_GROUP):
            page.goto(ui_server.url(f"/txn-broker/groups/{group}"))
            before = {(g.topic, g.partition): g for g in broker.metrics_figures().groups if g.group == group}
            assert any(f.lag > 0 for f in before.values()), f"{group} lags"
            for (t, n), figures in before.items():
                row = page.locator(f"#group-partitions tr[data-tp='{t}-{n}']")
                lag = int(metrics[("txn_broker_consumer_group_lag", (group, t, str(n)))])
                expect(row.locator("[data-field=lag]")).to_have_text(f"{lag:,}")
                bar = page.locator(f"#group-lag-chart g[data-key='{t}-{n}']")
                expect(bar).to_have_attribute("data-value", str(lag))
                shown = float(row.locator("[data-field=lag_seconds]").get_attribute("data-seconds") or "nan")
                [after] = [g for g in broker.metrics_figures().groups if (g.group, g.topic, g.partition) == (
                    group, t, n)]
                assert figures.lag_seconds - slack <= shown <= after.lag_seconds, (shown, figures, after)

        # the Iceberg table of LAKE against its last stable offsets, as `txn-broker iceberg status`
        page.goto(ui_server.url(f"/txn-broker/topics/{LAKE}"))
        [before] = broker.iceberg_status([LAKE])
        assert [(p.published_offset, p.offsets_behind) for p in before.partitions] == [(3, 2), (0, 1)]
        for part in before.partitions:
            row = page.locator(f"#topic-partitions tr[data-partition='{part.partition}']")
            expect(row.locator("[data-field=iceberg_published_offset]")).to_have_text(f"{part.published_offset:,}")
            expect(row.locator("[data-field=iceberg_offsets_behind]")).to_have_text(f"{part.offsets_behind:,}")
            shown = float(row.locator("[data-field=iceberg_seconds_behind]").get_attribute("data-seconds") or "nan")
            [after] = broker.iceberg_status([LAKE])
            assert part.seconds_behind - slack <= shown <= after.partitions[part.partition].seconds_behind
        expect(page.locator("#topic-iceberg")).to_contain_text(before.table)
        page.screenshot(path=str(TOPIC_SCREENSHOT), full_page=True)  # the docs' picture of a topic
        page.goto(ui_server.url("/txn-broker/topics"))
        expect(page.locator(f"#topics-body tr[data-topic='{LAKE}'] [data-field=iceberg]")).to_contain_text(
            "3 offsets")
        assert not page.errors, page.errors
    except BaseException:
        page.failed = True
        raise
