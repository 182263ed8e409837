"""Users, roles, password hashes, who launched a run, tags and notes, on the real store (plain
PostgreSQL and TimescaleDB): deploy/sql/0230, workers/store/users.py, workers/store/run_notes.py,
analysis/store/notes.py and the filters of analysis.store.load.load_runs."""

from __future__ import annotations

import psycopg
import pytest

from analysis.store.load import load_run_labels, load_runs
from analysis.store.notes import load_notes, load_tags
from tests.support.people import PASSWORDS, add_people, make_people_runs
from workers.store import passwords, run_notes, users

pytestmark = pytest.mark.integration


def test_users_roles_and_logins(store_url: str) -> None:
    add_people(store_url)
    with psycopg.connect(store_url) as conn:
        assert [(u.name, u.role, u.has_password) for u in users.list_users(conn)] == [
            ("ada", "admin", True),
            ("rune", "runner", True),
            ("vera", "viewer", True),
        ]
        stored = conn.execute("SELECT password_hash FROM users WHERE name = 'vera'").fetchone()
        assert stored is not None and stored[0].startswith("scrypt$n=32768,r=8,p=3$")
        dump = str(conn.execute("SELECT * FROM users").fetchall())
        assert not any(pw in dump for pw in PASSWORDS.values())  # never the password itself
        assert users.authenticate(conn, "vera", PASSWORDS["vera"]) == "viewer"
        assert users.authenticate(conn, "vera", PASSWORDS["rune"]) is None  # wrong password
        assert users.authenticate(conn, "nobody", PASSWORDS["vera"]) is None  # unknown name
        with pytest.raises(users.UserError, match="user 'vera' already exists"):
            users.add_user(conn, "vera", "admin", "another-pw-1")
        with pytest.raises(users.UserError, match="unknown role 'boss': one of viewer, runner"):
            users.add_user(conn, "bob", "boss", "bob-password-1")
        with pytest.raises(users.UserError, match="at least 8 characters"):
            users.add_user(conn, "bob", "viewer", "short")
        with pytest.raises(users.UserError, match="is not a user name"):
            users.add_user(conn, "bob smith", "viewer", "bob-password-1")
        with pytest.raises(users.UserError, match="no user 'bob'"):
            users.set_role(conn, "bob", "runner")
        assert users.count_users(conn) == 3  # none of the refused ones was written
        users.set_role(conn, "vera", "runner")
        assert users.role_of(conn, "vera") == "runner"
        # an OIDC-only user has no password anyone could guess
        users.add_user(conn, "olga@example.org", "viewer", None)
        assert users.authenticate(conn, "olga@example.org", "") is None
        assert users.role_of(conn, "olga@example.org") == "viewer"
        users.remove_user(conn, "olga@example.org")
        with pytest.raises(users.UserError, match=r"no user 'olga@example\.org'"):
            users.remove_user(conn, "olga@example.org")
        assert users.count_users(conn) == 3


def test_an_older_hash_is_upgraded_at_the_next_login(store_url: str) -> None:
    weak = passwords.hash_password("rehash-me-77", passwords.Cost(n=2**10, r=8, p=1))
    with psycopg.connect(store_url) as conn:
        conn.execute(
            "INSERT INTO users (name, role, password_hash) VALUES ('old', 'viewer', %s)", (weak,)
        )
        conn.commit()
        assert users.authenticate(conn, "old", "rehash-me-77") == "viewer"
        row = conn.execute("SELECT password_hash FROM users WHERE name = 'old'").fetchone()
        assert row is not None and row[0] != weak and not passwords.needs_rehash(row[0])
        assert users.authenticate(conn, "old", "rehash-me-77") == "viewer"


def test_who_launched_tags_notes_and_the_filters(store_url: str) -> None:
    ids = make_people_runs(store_url)
    with psycopg.connect(store_url, autocommit=True) as conn:
        by_rune = load_runs(conn, launched_by="rune")
        assert set(by_rune["name"]) == {"pp-llama-old", "pp-llama-new"}
        assert set(load_runs(conn, preset="vllm")["name"]) == {"pp-vllm"}
        assert set(load_runs(conn, model="qwen3-8b")["name"]) == {"pp-vllm", "pp-plain"}
        assert set(load_runs(conn, labels={"engine": "sglang"})["name"]) == {"pp-plain"}
        everything = load_runs(conn)
        # a picker's labels: the same runs in the same order (newest first), limit and ids too
        cols = ["run_id", "name", "started_at"]
        assert load_run_labels(conn).equals(everything[cols])
        assert load_run_labels(conn, limit=2).equals(load_runs(conn, limit=2)[cols])
        some = [ids["pp-plain"], ids["pp-vllm"]]
        assert load_run_labels(conn, run_ids=some).equals(load_runs(conn, run_ids=some)[cols])
        for status in ("completed", "running"):  # the Live page's picker: running runs
            by_status = load_run_labels(conn, status=status)
            assert by_status.equals(load_runs(conn, status=status)[cols])
        row = everything.set_index("name").loc["pp-plain"]
        assert row["launched_by"] is None and row["preset"] is None and list(row["tags"]) == []

        assert run_notes.add_tag(conn, ids["pp-vllm"], "baseline", "ada")
        assert not run_notes.add_tag(conn, ids["pp-vllm"], "baseline", "rune")  # already
        assert run_notes.add_tag(conn, ids["pp-vllm"], "regression:tpot", "rune")
        assert run_notes.add_tag(conn, ids["pp-plain"], "baseline", None)
        assert load_tags(conn, ids["pp-vllm"]) == ["baseline", "regression:tpot"]
        tagged = load_runs(conn, tag="baseline")
        assert set(tagged["name"]) == {"pp-vllm", "pp-plain"}
        assert set(load_runs(conn, tag="baseline", launched_by="ada")["name"]) == {"pp-vllm"}
        assert list(tagged.set_index("name").loc["pp-vllm", "tags"]) == [
            "baseline",
            "regression:tpot",
        ]
        assert run_notes.remove_tag(conn, ids["pp-vllm"], "regression:tpot")
        assert not run_notes.remove_tag(conn, ids["pp-vllm"], "regression:tpot")
        with pytest.raises(run_notes.AnnotationError, match="is not a tag"):
            run_notes.add_tag(conn, ids["pp-vllm"], "two words", "ada")
        with pytest.raises(run_notes.AnnotationError, match="not found in the store"):
            run_notes.add_tag(conn, "00000000-0000-0000-0000-000000000000", "x", "ada")

        key = "sk-live-" + "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
        first = run_notes.add_note(conn, ids["pp-vllm"], "  first look: TPOT fine  ", "ada")
        second = run_notes.add_note(conn, ids["pp-vllm"], f"the key was {key}", "rune")
        assert second > first
        got = load_notes(conn, ids["pp-vllm"])
        assert (got[0].author, got[0].body) == ("ada", "first look: TPOT fine")
        assert key not in got[1].body and got[1].author == "rune"  # scrubbed before storing
        with pytest.raises(run_notes.AnnotationError, match="the note is empty"):
            run_notes.add_note(conn, ids["pp-vllm"], "   ", "ada")
        conn.execute("DELETE FROM runs WHERE run_id = %s", (ids["pp-vllm"],))
        assert load_notes(conn, ids["pp-vllm"]) == [] and load_tags(conn, ids["pp-vllm"]) == []


def test_password_hash_format_and_refusals() -> None:
    cheap = passwords.Cost(n=2**10, r=8, p=1)
    one, two = (
        passwords.hash_password("same-password", cheap),
        passwords.hash_password("same-password", cheap),
    )
    assert one != two  # a fresh salt each time
    assert passwords.verify_password("same-password", one)
    assert not passwords.verify_password("same-passwor", one)
    assert not passwords.verify_password("same-password", "sha256$abc")  # not ours: False
    assert passwords.needs_rehash(one) and not passwords.needs_rehash(one, cheap)
    with pytest.raises(ValueError, match="control characters"):
        passwords.hash_password("new\nline-password", cheap)
    with pytest.raises(ValueError, match="at most 1024"):
        passwords.hash_password("x" * 1025, cheap)
