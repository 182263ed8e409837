"""The Run page's tags and notes: shown to everyone; the controls to add a tag, take one off
and add a note only to a role that may annotate (runner, admin: workers/store/users.py). The
author is the signed-in person (ui/login.current_visitor)."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from loadgen.errors import PeakloadError
from ui.data import people
from ui.people import Visitor


def show(run_id: str, visitor: Visitor) -> None:
    """Tags as a line, notes oldest first, then (if allowed) the forms that change them."""
    tags = people.tags(run_id)
    st.markdown("**Tags:** " + (" ".join(f"`{t}`" for t in tags) if tags else "none"))
    notes = people.notes(run_id)
    with st.expander(f"Notes ({len(notes)})", expanded=bool(notes)):
        for n in notes:
            st.markdown(f"**{n.author or 'someone'}** · {n.created_at:%Y-%m-%d %H:%M} UTC")
            st.text(n.body)
        if not notes:
            st.caption("No notes yet.")
    if not visitor.may_annotate:
        return
    tag_col, note_col = st.columns([1, 2])
    with tag_col.form("tag_form", clear_on_submit=True):
        new_tag = st.text_input("Add a tag", key="tag_new", placeholder="baseline")
        if st.form_submit_button("Tag"):
            _do(lambda: people.add_tag(run_id, new_tag.strip(), visitor.name), "Tagged.")
    if tags:
        off = tag_col.selectbox(
            "Remove a tag", ["", *tags], key="tag_off", format_func=lambda t: t or "(pick one)"
        )
        if tag_col.button("Remove tag", disabled=not off, key="tag_remove"):
            _do(lambda: people.remove_tag(run_id, off), "Tag removed.")
    with note_col.form("note_form", clear_on_submit=True):
        text = st.text_area("Add a note", key="note_new", height=80)
        if st.form_submit_button("Add note"):
            _do(lambda: people.add_note(run_id, text, visitor.name), "Note added.")


def _do(change: Callable[[], object], done: str) -> None:
    try:
        change()
    except PeakloadError as exc:
        st.error(str(exc))
        return
    st.toast(done)
    st.rerun()
