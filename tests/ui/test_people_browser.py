"""People, as a person sees them: `peakload ui` (a real server, a store with users) in headless
Chromium. A viewer logs in, finds no Launch page and no tag or note controls, and filters the
Runs page by who launched; logged out and back in as a runner, the Launch page is there and a
tag added on the Run page shows. Screenshots go to test-artifacts/ui/people-*.png."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.support.people import PASSWORDS, PeopleStore
from tests.ui.conftest import UiStore
from tests.ui.test_browser import ARTIFACTS, PAGE_TIMEOUT_MS, browser, settle, ui_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # about 90 s: eight logins and page loads
__all__ = ["browser"]  # the fixture, imported for this module's tests


def log_in(page: object, name: str, heading: str = "Runs") -> str:
    page.get_by_label("Name", exact=True).fill(name)  # type: ignore[attr-defined]
    page.get_by_label("Password", exact=True).fill(PASSWORDS[name])  # type: ignore[attr-defined]
    page.get_by_role("button", name="Log in").click()  # type: ignore[attr-defined]
    return settle(page, heading)


def visit(page: object, url: str, name: str, heading: str) -> str:
    """Open `url` typed in the address bar: a new session, so log in again (the page asked for
    is kept through the login)."""
    page.goto(url)  # type: ignore[attr-defined]
    settle(page, "peakload")
    return log_in(page, name, heading)


def nav_links(page: object) -> set[str]:
    nav = page.locator("[data-testid='stSidebarNav']")  # type: ignore[attr-defined]
    return {t.strip().split("\n")[-1] for t in nav.locator("a").all_inner_texts()}  # no icon


def test_a_viewer_and_a_runner_see_different_apps(
    people_store: PeopleStore, browser: object, tmp_path: Path
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    store = UiStore(people_store.url, people_store.ids, people_store.cache_dir)
    vllm = people_store.ids["pp-vllm"]
    with ui_server(store, tmp_path) as base:  # localhost, yet users must log in
        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(f"{base}/")
        text = settle(page, "peakload")
        assert "Name" in text and "pp-vllm" not in page.content()
        page.get_by_label("Name", exact=True).fill("vera")
        page.get_by_label("Password", exact=True).fill("not-her-password")
        page.get_by_role("button", name="Log in").click()
        page.get_by_text("Wrong name or password.").wait_for(timeout=PAGE_TIMEOUT_MS)

        text = log_in(page, "vera")
        assert "Launch" not in nav_links(page) and "Runs" in nav_links(page)
        page.get_by_text("Signed in as vera (viewer)").wait_for(timeout=PAGE_TIMEOUT_MS)
        # the Runs page filtered by who launched: its list of links names what the grid shows
        settle(page, "Runs")
        page.get_by_text("4 run(s)").wait_for(timeout=PAGE_TIMEOUT_MS)
        page.get_by_label("Launched by (exact)").fill("rune")
        page.get_by_label("Launched by (exact)").press("Enter")
        page.get_by_text("2 run(s)").wait_for(timeout=PAGE_TIMEOUT_MS)
        settle(page, "Runs")
        page.get_by_text("Links to each run").click()
        page.get_by_text("pp-llama-new ·").wait_for(timeout=PAGE_TIMEOUT_MS)
        main = str(page.inner_text("[data-testid='stMain']"))
        assert "pp-llama-old ·" in main and "pp-vllm ·" not in main, main
        page.screenshot(path=str(ARTIFACTS / "people-viewer-runs.png"), full_page=True)

        text = visit(page, f"{base}/run?run={vllm}", "vera", "Run: pp-vllm")
        assert "Tags:" in text and "Add a tag" not in text and "Add a note" not in text
        page.screenshot(path=str(ARTIFACTS / "people-viewer-run.png"), full_page=True)
        page.get_by_role("button", name="Log out").click()
        page.get_by_role("button", name="Log in").wait_for(timeout=PAGE_TIMEOUT_MS)
        settle(page, "peakload")
        assert "pp-vllm" not in page.content()
        page.goto(f"{base}/launch")  # typed by hand: not a viewer's page
        settle(page, "peakload")
        page.get_by_label("Name", exact=True).fill("vera")
        page.get_by_label("Password", exact=True).fill(PASSWORDS["vera"])
        page.get_by_role("button", name="Log in").click()
        settle(page, "Runs")  # the default page instead
        page.screenshot(path=str(ARTIFACTS / "people-viewer-launch.png"), full_page=True)
        assert "Launch a run" not in page.content()

        # a runner's bookmark of /launch survives the login
        text = visit(page, f"{base}/launch", "rune", "Launch a run")
        assert "Launch" in nav_links(page)
        text = visit(page, f"{base}/run?run={vllm}", "rune", "Run: pp-vllm")
        sidebar = str(page.inner_text("[data-testid='stSidebar']"))
        assert "Signed in as rune (runner)" in sidebar, sidebar
        page.get_by_label("Add a tag").wait_for(timeout=PAGE_TIMEOUT_MS)
        text = str(page.inner_text("[data-testid='stMain']"))
        assert "Add a tag" in text and "Add a note" in text
        page.get_by_label("Add a tag").fill("seen-in-browser")
        page.get_by_role("button", name="Tag", exact=True).click()
        page.get_by_text("seen-in-browser").first.wait_for(timeout=PAGE_TIMEOUT_MS)
        page.screenshot(path=str(ARTIFACTS / "people-runner-run.png"), full_page=True)
    with psycopg.connect(people_store.url) as conn:
        row = conn.execute(
            "DELETE FROM run_tags WHERE run_id = %s AND tag = 'seen-in-browser' "
            "RETURNING tagged_by",
            (vllm,),
        ).fetchone()
    assert row is not None and row[0] == "rune"
