"""The store's people for the app: counting users and checking a login (never cached: a removed
user or a changed role counts from the next page view), and a run's tags and notes (cached
briefly; a change clears the cache). Writes go through workers/store (users, annotations).
"""

from __future__ import annotations

import streamlit as st

from analysis.store import notes as an
from ui.data import shared
from workers.store import run_notes, users

NOTES_TTL_S = 5


def user_count() -> int:
    with shared.store().conn() as c:
        return users.count_users(c)


def authenticate(name: str, password: str) -> str | None:
    """The role when the name and password match a user; None otherwise."""
    with shared.store().conn() as c:
        return users.authenticate(c, name, password)


def role_of(name: str) -> str | None:
    with shared.store().conn() as c:
        return users.role_of(c, name)


@st.cache_data(ttl=NOTES_TTL_S, show_spinner=False)
def tags(run_id: str) -> list[str]:
    with shared.store().conn() as c:
        return an.load_tags(c, run_id)


@st.cache_data(ttl=NOTES_TTL_S, show_spinner=False)
def notes(run_id: str) -> list[an.Note]:
    with shared.store().conn() as c:
        return an.load_notes(c, run_id)


def _changed() -> None:
    tags.clear()
    notes.clear()
    shared.runs.clear()  # the Runs page lists tags and filters by them


def add_tag(run_id: str, tag: str, by: str | None) -> bool:
    with shared.store().conn() as c:
        done = run_notes.add_tag(c, run_id, tag, by)
    _changed()
    return done


def remove_tag(run_id: str, tag: str) -> bool:
    with shared.store().conn() as c:
        done = run_notes.remove_tag(c, run_id, tag)
    _changed()
    return done


def add_note(run_id: str, text: str, by: str | None) -> int:
    with shared.store().conn() as c:
        note_id = run_notes.add_note(c, run_id, text, by)
    _changed()
    return note_id


def list_users() -> list[users.User]:
    with shared.store().conn() as c:
        return users.list_users(c)


def add_user(name: str, role: str, password: str | None) -> None:
    with shared.store().conn() as c:
        users.add_user(c, name, role, password)


def set_role(name: str, role: str) -> None:
    with shared.store().conn() as c:
        users.set_role(c, name, role)


def remove_user(name: str) -> None:
    with shared.store().conn() as c:
        users.remove_user(c, name)
