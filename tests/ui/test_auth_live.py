"""The login gate (ui/auth.py) in the app and in `peakload ui`, and the Live page following a
run in progress."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from loadgen.runspec.spec import spec_from_dict
from tests.support.sim import start_sim
from tests.ui.conftest import APP, UiStore, page_text
from tests.ui.stored_runs import CANARY_KEY_ENV, RELAXED
from ui import auth
from workers.local import run_local

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("127.0.0.2", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        (None, False),
        ("10.0.0.5", False),
        ("example.org", False),
    ],
)
def test_which_hosts_are_local(host: str | None, local: bool) -> None:
    assert auth.is_local_host(host) is local
    assert auth.auth_required(host, {}) is (not local)


def test_password_sources_and_comparison() -> None:
    digest = hashlib.sha256(b"s3cret").hexdigest()
    assert auth.auth_configured({}, {}) is None
    assert auth.auth_configured({}, {auth.PASSWORD_ENV: "pw"}) == "password"
    from_secrets = auth.password_digest({"peakload": {"password_sha256": digest}}, {})
    assert from_secrets is not None and auth.password_ok("s3cret", from_secrets)
    assert not auth.password_ok("s3cret ", from_secrets)
    with pytest.raises(ValueError, match="not hex"):
        auth.password_digest({"peakload": {"password_sha256": "zz"}}, {})
    oidc = {"auth": {"redirect_uri": "https://x/oauth2callback", "cookie_secret": "c"}}
    assert auth.auth_configured(oidc, {}) == "oidc"
    assert auth.auth_required("127.0.0.1", {auth.REQUIRE_ENV: "1"})


def _ui(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != auth.PASSWORD_ENV}
    clean.update(HOME=str(tmp_path), **env)  # no ~/.streamlit/secrets.toml of the user's
    return subprocess.run(
        [sys.executable, "-m", "ui", "ui", *args],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_peakload_ui_refuses_a_public_host_without_a_login(tmp_path: Path) -> None:
    done = _ui(["--host", "0.0.0.0", "--port", "9"], tmp_path)
    assert done.returncode == 2
    assert "refusing to serve on 0.0.0.0" in done.stderr
    assert auth.PASSWORD_ENV in done.stderr
    bad = tmp_path / ".streamlit"
    bad.mkdir()
    (bad / "secrets.toml").write_text('[peakload]\npassword_sha256 = "abc"\n')
    done = _ui(["--host", "0.0.0.0", "--port", "9"], tmp_path)
    assert done.returncode == 2 and "password_sha256" in done.stderr


def test_login_form_until_the_password_is_given(
    app_env: UiStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(auth.REQUIRE_ENV, "1")
    monkeypatch.setenv(auth.PASSWORD_ENV, "correct horse")
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert [t.value for t in at.title] == ["peakload"]
    assert not at.dataframe and "Runs" not in page_text(at)
    at.text_input[0].input("wrong")
    at.button[0].click().run()
    assert "Wrong password." in page_text(at)
    assert not at.dataframe
    at.text_input[0].input("correct horse")
    at.button[0].click().run()
    assert at.title[0].value == "Runs"
    assert "ui-sweep" in set(at.dataframe[0].value["name"])


def test_public_address_without_login_shows_only_the_reason(
    app_env: UiStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(auth.PASSWORD_ENV, raising=False)
    from streamlit import config

    config.set_option("server.address", "0.0.0.0")
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert "has no login configured" in at.error[0].value
    assert not at.dataframe


def test_live_page_follows_a_running_run(
    app_page: Callable[..., AppTest], app_env: UiStore, tmp_path: Path
) -> None:
    started = threading.Event()
    ids: list[str] = []
    with start_sim(["--preset", "fixed", "--ttft-ms", "30", "--itl-ms", "10"], tmp_path) as sim:
        spec = spec_from_dict(
            {
                "name": "ui-live",
                "target": {
                    "api": "openai-chat",
                    "base_url": sim.base_url,
                    "model": "m",
                    "api_key_env": CANARY_KEY_ENV,
                },
                "workload": {"prompt_tokens": 32, "output_tokens": 16},
                "load": {"concurrency": [2], "duration_s": 5},
                "regions": [{"name": "eu", "share": 0.5}, {"name": "us", "share": 0.5}],
                "validity": RELAXED,
            }
        )

        def on_started(run_id: str) -> None:
            ids.append(run_id)
            started.set()

        worker = threading.Thread(
            target=run_local,
            args=(spec,),
            kwargs={"database_url": app_env.url, "on_started": on_started},
            daemon=True,
        )
        worker.start()
        assert started.wait(30), "the run did not start"
        deadline = time.monotonic() + 20
        while True:  # until the first ticks are stored
            at = app_page("live", run=ids[0])
            regions = at.dataframe[0].value if at.dataframe else None
            if (regions is not None and len(regions) == 2) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        text = page_text(at)
        assert "ui-live" in text and "status **running**" in text
        assert regions is not None and set(regions["region"]) == {"eu", "us"}
        assert (regions["started"] > 0).all()
        worker.join(60)
        assert not worker.is_alive()
    at = app_page("live", run=ids[0])
    assert "The run has ended (completed)" in page_text(at)


def test_no_pages_folder_beside_the_app() -> None:
    """Streamlit runs a `pages/` folder beside the main script as a v1 multipage app, executing
    the page scripts without ui/app.py: the login gate would be skipped."""
    assert not (APP.parent / "pages").exists()
