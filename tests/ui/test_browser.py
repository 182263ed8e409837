"""What a person sees: `peakload ui` started as a real server on a free loopback port against
the test store, driven by headless Chromium (Debian's /usr/bin/chromium through Playwright; never
`playwright install`). Each page is opened, checked, and saved to test-artifacts/ui/. The served
HTML never holds the canary key or prompt; with the login forced on, a visitor sees only it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port
from tests.ui.conftest import UiStore
from tests.ui.stored_runs import CANARY_KEY, CANARY_PROMPT

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
START_TIMEOUT_S = 60.0
PAGE_TIMEOUT_MS = 90_000


@contextmanager
def ui_server(store: UiStore, tmp: Path, **env: str) -> Iterator[str]:
    """`peakload ui` on a free loopback port; yields its base URL; SIGTERM and wait at exit."""
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("PEAKLOAD_UI_")}
    full.update(
        PEAKLOAD_DATABASE_URL=store.url,
        PEAKLOAD_ANALYSIS_CACHE=store.cache_dir,
        HOME=str(tmp),
        **env,
    )
    log = (tmp / f"ui-{port}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ui", "ui", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp,
        env=full,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, (tmp / f"ui-{port}.log").read_text()
            try:
                if httpx.get(f"{base}/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "peakload ui did not come up"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: run deploy/local/chromium.sh")
    from playwright.sync_api import sync_playwright

    profile = tmp_path / "chromium-profile"
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1400, "height": 1600},
        )
        try:
            yield ctx
        finally:
            ctx.close()
    shutil.rmtree(profile, ignore_errors=True)


# The app is idle: Streamlit's own script state (on stApp) says no script runs, no status widget
# shows and every element has replaced its skeleton, and that has held for IDLE_MS. A loaded
# machine can start a page's script late (or run it twice): without the wait, a page read
# between its heading and its verdict table shows half of itself (ci1 of 2026-12-02).
IDLE_MS = 1000
IDLE_FOR_A_MOMENT = f"""() => {{
    const app = document.querySelector('[data-testid="stApp"]');
    const idle = app !== null
        && app.getAttribute('data-test-script-state') === 'notRunning'
        && !document.querySelector('[data-testid="stStatusWidget"]')
        && !document.querySelector('[data-testid="stSkeleton"]');
    if (!idle) {{ window.__peakloadIdleSince = undefined; return false; }}
    window.__peakloadIdleSince ??= performance.now();
    return performance.now() - window.__peakloadIdleSince >= {IDLE_MS};
}}"""


def settle(page: object, heading: str) -> str:
    """Wait until the page shows `heading` and the script has finished; return the text. A
    timeout says where the page was and what it showed (a bare Playwright timeout does not)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        return _settle(page, heading)
    except PlaywrightTimeout as exc:
        shown = page.evaluate(  # type: ignore[attr-defined]
            "(document.querySelector('[data-testid=\"stMain\"]') || document.body).innerText"
        )
        state = page.evaluate(  # type: ignore[attr-defined]
            "document.querySelector('[data-testid=\"stApp\"]')"
            "?.getAttribute('data-test-script-state')"
        )
        raise AssertionError(
            f"waiting for {heading!r} at {page.url}: {exc.message.splitlines()[0]}; "  # type: ignore[attr-defined]
            f"script state {state!r}; the page shows: {str(shown)[:600]!r}"
        ) from None


def _settle(page: object, heading: str) -> str:
    page.get_by_role("heading", name=heading).first.wait_for(timeout=PAGE_TIMEOUT_MS)
    page.wait_for_function(IDLE_FOR_A_MOMENT, timeout=PAGE_TIMEOUT_MS, polling=100)
    page.wait_for_function(  # plotly draws after the script ends, once its bundle loads
        "[...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')].every("
        "c => c.querySelector('.js-plotly-plot .main-svg'))",
        timeout=PAGE_TIMEOUT_MS,
    )
    page.wait_for_timeout(500)
    return str(page.inner_text("[data-testid='stMain']"))


def follow(page: object, link: re.Pattern[str], url_part: str, clicks: int = 3) -> None:
    """Click the link named `link` until the address holds `url_part` (the click is taken when
    the address names it, before the page renders). Clicked again after a third of the page
    timeout: twice in CI (stop 31, and 2026-12-05 with 4 test workers on 2 cores) a click on a
    run's link in the just-opened expander went unanswered for the whole 90 s."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for left in range(clicks - 1, -1, -1):
        page.get_by_role("link", name=link).click()  # type: ignore[attr-defined]
        try:
            page.wait_for_url(  # type: ignore[attr-defined]
                re.compile(re.escape(url_part)), timeout=PAGE_TIMEOUT_MS // clicks
            )
            return
        except PlaywrightTimeout:
            if not left:
                raise


@pytest.mark.slow  # about 50 s: every page of the app loaded and read in a real browser
def test_every_page_in_a_browser(ui_store: UiStore, browser: object, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ids = ui_store.ids
    visits = [
        ("", "Runs", ["ui-sweep", "ui-regions", "ui-failures", "ui-invalid"]),
        (f"run?run={ids['sweep']}", "Run: ui-sweep", ["Valid run", "TTFT from send"]),
        (f"run?run={ids['invalid']}", "Run: ui-invalid", ["INVALID run", "dispatch delay"]),
        (f"run?run={ids['regions']}", "Run: ui-regions", ["Requests"]),
        (f"compare?runs={ids['sweep']},{ids['failures']}", "Compare runs", ["ui-failures"]),
        # the verdict itself is the run's (measured here at idle priority, beside the serial
        # tests: tests/phases.py); its words and numbers are tests/ui/test_pages.py's
        (f"sla?run={ids['sweep']}", "SLA verdicts", ["p90 ttft_ms < 500", "samples at or above"]),
        ("nightly", "Nightly trends", ["nightly-sim", "Too few runs to decide"]),
        ("live", "Live", []),
        ("launch", "Launch a run", ["Mode: local"]),
    ]
    with ui_server(ui_store, tmp_path) as base:
        page = browser.new_page()  # type: ignore[attr-defined]
        for path, heading, expected in visits:
            page.goto(f"{base}/{path}")
            text = settle(page, heading)
            if path == "":  # Runs, the default page (at /): its table is a canvas grid, so
                # the names are read from the list of links, and one is followed
                page.get_by_text("Links to each run").click()
                page.get_by_text("ui-invalid ·").wait_for(timeout=PAGE_TIMEOUT_MS)
                text = str(page.inner_text("[data-testid='stMain']"))
                follow(page, re.compile(r"^ui-regions ·"), f"run={ids['regions']}")
                assert "Run: ui-regions" in settle(page, "Run: ui-regions")
                assert f"run={ids['regions']}" in page.url
            name = (path.split("?")[0] or "runs") + (
                "-" + path.split("=")[1][:8] if "=" in path else ""
            )
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
            for want in expected:
                assert want in text, f"{path}: {want!r} not shown"
            if path.startswith("run?") and heading == "Run: ui-regions":
                for tab in ("Over time", "Token timeline", "Levels"):
                    page.get_by_role("tab", name=tab).click()
                    page.wait_for_timeout(1500)  # plotly sizes a chart when its tab shows
                    slug = tab.lower().replace(" ", "-")
                    page.screenshot(path=str(ARTIFACTS / f"{name}-{slug}.png"), full_page=True)
                legends = set(page.locator(".legendtext").all_text_contents())
                assert {"eu-west", "us-east", "ap-south"} <= legends, legends
            html = page.content()
            assert CANARY_KEY not in html and CANARY_KEY not in text, path
            assert CANARY_PROMPT.split()[0] not in html, path
        # the dark theme (Streamlit follows the browser's preference): charts still drawn
        page.emulate_media(color_scheme="dark")
        page.goto(f"{base}/compare?runs={ids['sweep']},{ids['regions']},{ids['failures']}")
        settle(page, "Compare runs")
        background = page.evaluate(
            "getComputedStyle(document.querySelector('[data-testid=\"stApp\"]')).backgroundColor"
        )
        assert background != "rgb(255, 255, 255)", background
        page.screenshot(path=str(ARTIFACTS / "compare-dark.png"), full_page=True)
        page.emulate_media(color_scheme="light")
        # the run table is a canvas grid: its cells are attached, not visible text
        page.goto(f"{base}/")
        settle(page, "Runs")
        page.wait_for_selector("[data-testid='stDataFrame']", state="attached")
        assert "Page not found" not in page.content()
        raw = httpx.get(f"{base}/", timeout=10).text
        assert CANARY_KEY not in raw and CANARY_PROMPT.split()[0] not in raw


@pytest.mark.slow  # 30-40 s in the loaded parallel phase: a Streamlit server, two pages, 2 logins
def test_login_form_only_until_authenticated(
    ui_store: UiStore, browser: object, tmp_path: Path
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with ui_server(
        ui_store, tmp_path, PEAKLOAD_UI_REQUIRE_AUTH="1", PEAKLOAD_UI_PASSWORD="browser-pw-91"
    ) as base:
        page = browser.new_page()  # type: ignore[attr-defined]
        for path in ("", f"run?run={ui_store.ids['sweep']}"):
            page.goto(f"{base}/{path}")
            text = settle(page, "peakload")
            page.screenshot(path=str(ARTIFACTS / f"login-{path[:3] or 'runs'}.png"), full_page=True)
            assert "Password" in text
            assert "ui-sweep" not in text and "Runs" not in text
            assert "ui-sweep" not in page.content()
        page.get_by_label("Password", exact=True).first.fill("nope")
        page.get_by_role("button", name="Log in").click()
        page.get_by_text("Wrong password.").wait_for(timeout=PAGE_TIMEOUT_MS)
        page.get_by_label("Password", exact=True).first.fill("browser-pw-91")
        page.get_by_role("button", name="Log in").click()
        page.get_by_role("button", name="Log in").wait_for(
            state="detached", timeout=PAGE_TIMEOUT_MS
        )
        text = settle(page, "Run: ui-sweep")  # logged in: the page asked for, same session
        assert "Valid run" in text
        page.get_by_role("link", name="Runs").click()  # in-app navigation keeps the session
        settle(page, "Runs")
        page.screenshot(path=str(ARTIFACTS / "login-after.png"), full_page=True)


def _fill(page: object, label: str, value: str) -> None:
    """Type into a Streamlit input and commit it (Enter), as a person does."""
    box = page.get_by_label(label, exact=True)  # type: ignore[attr-defined]
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(400)  # type: ignore[attr-defined]


@pytest.mark.slow  # about 2 minutes: a real run, then kaleido draws two images
@pytest.mark.timeout(600)  # the first image's wait below (kaleido's Chromium) fits in it
def test_launch_from_the_form_then_read_its_charts(
    ui_store: UiStore, browser: object, tmp_path: Path
) -> None:
    """Fill the Launch form, see the TOML it wrote, probe, Start a run against the simulated
    engine (one slot: 16 streams queue, so the levels' TTFTs span decades), find it in Runs,
    read its percentile chart (log latency axis, tail labelled p50 to p99.9) and download the
    chart as PNG and SVG."""
    import psycopg

    from tests.support.sim import start_sim

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # a batching engine with one slot (the fixed schedule ignores slots): at 16 streams 15 wait
    # a whole answer each, so the two levels' TTFTs are decades apart on any host
    engine = tmp_path / "one-slot.json"
    engine.write_text(
        '{"mode": "batching", "slots": 1, "decode_step_ms": 1.0, "decode_step_ms_per_seq": 0.0}'
    )
    sim_args = ["--config", str(engine)]
    with (
        start_sim(sim_args) as sim,
        ui_server(ui_store, tmp_path, PEAKLOAD_TARGET_ALLOWLIST="127.0.0.1") as base,
    ):
        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(f"{base}/launch")
        settle(page, "Launch a run")
        _fill(page, "Run name", "browser-launched")
        _fill(page, "Base URL", sim.base_url)
        _fill(page, "Model", "sim-model")
        _fill(page, "Concurrency levels (streams)", "1, 16")
        _fill(page, "Duration per level (s)", "2")
        _fill(page, "Warm-up (s)", "0")
        toml = page.get_by_label("TOML (editable: this text is what is checked, probed and run)")
        # every field's value in the text (each Enter reruns the form; the last one lands last)
        page.wait_for_function(
            "ts => ts.every(t => document.querySelector('textarea').value.includes(t))",
            arg=["concurrency = [1, 16]", "duration_s = 2.0", "warmup_s = 0.0"],
            timeout=PAGE_TIMEOUT_MS,
        )
        text = toml.input_value()
        assert f'base_url = "{sim.base_url}"' in text and 'name = "browser-launched"' in text
        with page.expect_download(timeout=PAGE_TIMEOUT_MS) as spec_file:
            page.get_by_role("button", name="Download spec.toml").click()
        assert spec_file.value.path().read_text() == text
        assert page.get_by_role("button", name="Start run").is_disabled()
        page.get_by_role("button", name="Probe the target").click()
        page.get_by_text("Probe: nothing rejected").wait_for(timeout=PAGE_TIMEOUT_MS)
        shown = str(page.inner_text("[data-testid='stMain']"))
        page.screenshot(path=str(ARTIFACTS / "launch-form-probed.png"), full_page=True)
        assert page.get_by_role("button", name="Start run").is_enabled(), shown
        page.get_by_role("button", name="Start run").click()
        page.get_by_text("(local)").wait_for(timeout=PAGE_TIMEOUT_MS)
        main = str(page.inner_text("[data-testid='stMain']"))
        found = re.search(r"Run ([0-9a-f-]{16,}) \(local\)", main)
        assert found, main
        run_id = found.group(1)
        deadline = time.monotonic() + 90
        while True:
            with psycopg.connect(ui_store.url) as conn:
                row = conn.execute(
                    "SELECT status FROM runs WHERE run_id = %s", (run_id,)
                ).fetchone()
            if row and row[0] not in ("running", "pending"):
                break
            assert time.monotonic() < deadline, f"run {run_id} did not finish: {row}"
            time.sleep(0.5)
        assert row[0] == "completed", row
        page.goto(f"{base}/")
        settle(page, "Runs")
        page.get_by_text("Links to each run").click()
        page.get_by_text("browser-launched ·").wait_for(timeout=PAGE_TIMEOUT_MS)

        page.goto(f"{base}/run?run={run_id}")
        settle(page, "Run: browser-launched")
        page.screenshot(path=str(ARTIFACTS / "run-launched-page.png"), full_page=True)
        axes = page.evaluate(
            "(() => { const l = document.querySelector('.js-plotly-plot')._fullLayout;"
            " return [l.yaxis.type, l.xaxis.type, l.yaxis.title.text]; })()"
        )
        assert axes[:2] == ["log", "log"], axes
        ticks = page.locator(".js-plotly-plot").first.locator(".xtick text").all_text_contents()
        assert {"p50", "p90", "p99", "p99.9"} <= set(ticks), ticks
        # drawn when clicked: the first image starts kaleido's Chromium in the app's process,
        # which on a host busy with other browsers took over PAGE_TIMEOUT_MS once
        for fmt, magic, wait_ms in (
            ("png", b"\x89PNG\r\n\x1a\n", 3 * PAGE_TIMEOUT_MS),
            ("svg", b"<svg", PAGE_TIMEOUT_MS),
        ):
            button = page.get_by_role("button", name=re.compile(rf"^percentiles-.*\.{fmt}$"))
            with page.expect_download(timeout=wait_ms) as image:
                button.first.click()
            data = image.value.path().read_bytes()
            assert data.startswith(magic), data[:40]
            (ARTIFACTS / f"run-launched-percentiles.{fmt}").write_bytes(data)
        page.get_by_role("tab", name="Timeslices").click()
        page.get_by_text("per 5 s window").first.wait_for(timeout=PAGE_TIMEOUT_MS)
        page.wait_for_timeout(1500)  # plotly sizes a chart when its tab shows
        page.screenshot(path=str(ARTIFACTS / "run-launched-timeslices.png"), full_page=True)
