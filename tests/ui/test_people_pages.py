"""People in the app (AppTest, a real store): with users, a name-and-password login (the shared
password no longer opens it, even on localhost); a viewer sees no Launch page and no tag or note
controls; a runner does, and what they add is stored with their name; the Runs page filters by
who launched, preset, tag, model, label and date. OIDC is checked offline: its configuration and
how an identity gets a role (Streamlit's `st.login` itself needs the provider)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import psycopg
import pytest
import streamlit as st
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from analysis.store.notes import load_notes, load_tags
from tests.support.people import PASSWORDS, PeopleStore
from tests.ui.conftest import APP, page_text
from ui import auth
from ui.login import VISITOR_KEY, WRONG_LOGIN
from ui.people import Visitor

pytestmark = pytest.mark.integration


@pytest.fixture
def people_env(
    people_store: PeopleStore, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> Iterator[PeopleStore]:
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", people_store.url)
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path))
    monkeypatch.setenv(auth.PASSWORD_ENV, "shared-password-9")  # ignored: users exist
    monkeypatch.delenv(auth.REQUIRE_ENV, raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "127.0.0.1")  # localhost: users still log in
    st.cache_data.clear()
    yield people_store
    st_config.set_option("server.address", before)


def logged_in(name: str, page: str | None = None, **params: str) -> AppTest:
    """The app after `name` logged in with their password, on `page` (default Runs)."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    if page:
        at.switch_page(f"views/{page}.py")
    at.run()
    assert [t.value for t in at.title] == ["peakload"], page_text(at)
    at.text_input(key="login_name").input(name)
    at.text_input(key="login_password").input(PASSWORDS[name])
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_users_log_in_by_name_and_password(people_env: PeopleStore) -> None:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert [t.value for t in at.title] == ["peakload"] and not at.dataframe
    at.text_input(key="login_name").input("vera")
    at.text_input(key="login_password").input("shared-password-9")  # the old shared one
    at.button[0].click().run()
    assert WRONG_LOGIN in page_text(at) and not at.dataframe
    at.text_input(key="login_name").input("nobody")
    at.text_input(key="login_password").input(PASSWORDS["vera"])
    at.button[0].click().run()
    assert WRONG_LOGIN in page_text(at) and not at.dataframe
    at.text_input(key="login_name").input("vera")
    at.text_input(key="login_password").input(PASSWORDS["vera"])
    at.button[0].click().run()
    assert at.title[0].value == "Runs"
    assert "Signed in as **vera** (viewer)" in [c.value for c in at.sidebar.caption]


def test_a_viewer_reads_but_neither_launches_nor_annotates(people_env: PeopleStore) -> None:
    run_id = people_env.ids["pp-vllm"]
    at = logged_in("vera", "run", run=run_id)
    assert at.title[0].value == "Run: pp-vllm"
    assert "**Tags:**" in page_text(at)
    assert not [f for f in at.text_input if f.key == "tag_new"]
    assert not [f for f in at.text_area if f.key == "note_new"]
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("views/launch.py")  # not in a viewer's navigation
    # and the page itself refuses a viewer, should it ever be reached
    page = AppTest.from_file(str(APP.parent / "views" / "launch.py"), default_timeout=60)
    page.session_state[VISITOR_KEY] = Visitor("vera", "viewer", "user")
    page.run()
    assert [e.value for e in page.error] == ["Launching runs needs the runner role."]
    assert not page.text_area and not page.button


def test_a_runner_tags_and_notes_and_may_launch(people_env: PeopleStore) -> None:
    run_id = people_env.ids["pp-llama-new"]
    at = logged_in("rune", "run", run=run_id)
    assert at.title[0].value == "Run: pp-llama-new"
    assert "launched by **rune**" in at.caption[0].value
    at.text_input(key="tag_new").input("candidate")
    at.button(key="FormSubmitter:tag_form-Tag").click().run()
    at.text_area(key="note_new").input("p99 TTFT held at 8 streams")
    at.button(key="FormSubmitter:note_form-Add note").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "`candidate`" in page_text(at)
    assert "p99 TTFT held at 8 streams" in [t.value for t in at.text]
    with psycopg.connect(people_env.url) as conn:
        assert load_tags(conn, run_id) == ["candidate"]
        assert [(n.author, n.body) for n in load_notes(conn, run_id)] == [
            ("rune", "p99 TTFT held at 8 streams")
        ]
    at.text_input(key="tag_new").input("not a tag!")
    at.button(key="FormSubmitter:tag_form-Tag").click().run()
    assert "is not a tag" in page_text(at)
    at.switch_page("views/launch.py").run()
    assert "Launch a run" in page_text(at)
    with psycopg.connect(people_env.url) as conn:
        conn.execute("DELETE FROM run_tags WHERE run_id = %s", (run_id,))
        conn.execute("DELETE FROM run_notes WHERE run_id = %s", (run_id,))


def test_runs_page_filters_by_owner_preset_tag_model_and_date(people_env: PeopleStore) -> None:
    with psycopg.connect(people_env.url) as conn:
        conn.execute(
            "INSERT INTO run_tags (run_id, tag) VALUES (%s, 'nightly') ON CONFLICT DO NOTHING",
            (people_env.ids["pp-plain"],),
        )
    at = logged_in("vera")
    names = lambda: sorted(at.dataframe[0].value["name"])  # noqa: E731
    assert names() == ["pp-llama-new", "pp-llama-old", "pp-plain", "pp-vllm"]
    table = at.dataframe[0].value.set_index("name")
    assert table.loc["pp-vllm", "launched_by"] == "ada" and table.loc["pp-vllm", "preset"] == "vllm"
    at.text_input(key="f_owner").input("rune").run()
    assert names() == ["pp-llama-new", "pp-llama-old"]
    at.date_input(key="f_since").set_value(dt.date(2025, 6, 1)).run()
    assert names() == ["pp-llama-new"]  # the old one started 2025-01-15
    at.date_input(key="f_since").set_value(None).run()
    at.date_input(key="f_until").set_value(dt.date(2025, 1, 31)).run()
    assert names() == ["pp-llama-old"]
    at.date_input(key="f_until").set_value(None).run()
    at.text_input(key="f_owner").input("").run()
    at.text_input(key="f_preset").input("vllm").run()
    assert names() == ["pp-vllm"]
    at.text_input(key="f_preset").input("").run()
    at.text_input(key="f_tag").input("nightly").run()
    assert names() == ["pp-plain"]
    at.text_input(key="f_tag").input("").run()
    at.text_input(key="f_model").input("qwen3-8b").run()
    assert names() == ["pp-plain", "pp-vllm"]
    at.text_input(key="f_label").input("engine=vllm").run()
    assert names() == ["pp-vllm"]


def test_oidc_configuration_offline() -> None:
    oidc = {"auth": {"redirect_uri": "https://pl.example.org/oauth2callback", "cookie_secret": "c"}}
    assert auth.oidc_configured(oidc)
    assert auth.oidc_default_role(oidc) == "viewer"
    assert auth.oidc_default_role({**oidc, "peakload": {"oidc_default_role": "runner"}}) == "runner"
    with pytest.raises(ValueError, match=r"oidc_default_role in secrets\.toml is 'boss'"):
        auth.oidc_default_role({"peakload": {"oidc_default_role": "boss"}})
    assert auth.oidc_identity({"email": "ada@example.org", "sub": "123"}) == "ada@example.org"
    assert auth.oidc_identity({"sub": "123"}) == "123"
    assert auth.oidc_identity({"email": " "}) is None
    # users are a login method of their own; with them a login is needed even on localhost
    assert auth.auth_configured({}, {}, user_count=2) == "users"
    assert auth.auth_required("127.0.0.1", {}, user_count=1)
    assert not auth.auth_required("127.0.0.1", {}, user_count=0)


def test_only_an_admin_manages_users(people_env: PeopleStore) -> None:
    at = logged_in("rune")
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("views/users.py")
    at = logged_in("ada", "users")
    assert at.title[0].value == "Users"
    assert list(at.dataframe[0].value["name"]) == ["ada", "rune", "vera"]
    at.text_input(key="user_name").input("rune")
    at.text_input(key="user_pw").input("whatever-pw-1")
    at.button(key="FormSubmitter:user_add-Add user").click().run()
    assert "user 'rune' already exists" in page_text(at)
    at.text_input(key="user_name").input("newbie")
    at.text_input(key="user_pw").input("newbie-pw-1")
    at.button(key="FormSubmitter:user_add-Add user").click().run()
    assert "User newbie added (viewer)." in page_text(at)
    assert list(at.dataframe[0].value["name"]) == ["ada", "newbie", "rune", "vera"]
    at.selectbox(key="user_pick").select("newbie")
    at.selectbox(key="user_new_role").select("runner")
    at.button(key="user_set_role").click().run()
    assert "User newbie is now runner." in page_text(at)
    at.selectbox(key="user_pick").select("ada")
    at.run()
    assert at.button(key="user_remove").disabled  # not oneself
    at.selectbox(key="user_pick").select("newbie")
    at.run()
    at.button(key="user_remove").click().run()
    assert "User newbie removed." in page_text(at)
    assert list(at.dataframe[0].value["name"]) == ["ada", "rune", "vera"]


def test_the_role_is_read_again_on_every_page_view(people_env: PeopleStore) -> None:
    from workers.store import users

    with psycopg.connect(people_env.url) as conn:
        users.add_user(conn, "temp", "viewer", "temp-password-1")
    try:
        at = AppTest.from_file(str(APP), default_timeout=60).run()
        at.text_input(key="login_name").input("temp")
        at.text_input(key="login_password").input("temp-password-1")
        at.button[0].click().run()
        assert at.title[0].value == "Runs"
        with psycopg.connect(people_env.url) as conn:
            users.set_role(conn, "temp", "runner")
        at.run()
        at.switch_page("views/launch.py").run()  # promoted: the page is there now
        assert "Launch a run" in page_text(at)
        with psycopg.connect(people_env.url) as conn:
            users.remove_user(conn, "temp")
        at.run()  # removed: back to the login, nothing of the store shown
        assert [t.value for t in at.title] == ["peakload"] and not at.dataframe
    finally:
        with psycopg.connect(people_env.url) as conn:
            conn.execute("DELETE FROM users WHERE name = 'temp'")


def test_an_unreadable_store_is_one_message_at_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.ports import free_port

    url = f"postgresql://nobody:secret-pw-5@127.0.0.1:{free_port()}/none"
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", url)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    [error] = [e.value for e in at.error]
    assert error.startswith("The store cannot be read, so nobody can log in: cannot connect")
    assert "secret-pw-5" not in error and not at.dataframe
