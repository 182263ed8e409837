"""Users: who may log in and with which role (admins only; the same as `peakload users`). The
first user added turns the name-and-password login on for everyone, this session included."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.data import people
from ui.login import current_visitor
from workers.store.users import ROLES, UserError

visitor = current_visitor()
if not visitor.may_manage_users:  # not in the navigation of other roles either (ui/app.py)
    st.error("Managing users needs the admin role.")
    st.stop()

st.title("Users")
found = people.list_users()
if not found:
    st.info(
        "No users yet: the app is open on localhost, or guarded by the single shared password. "
        "Adding a user turns the name-and-password login on (you will be asked to log in)."
    )
st.dataframe(
    pd.DataFrame(
        {
            "name": [u.name for u in found],
            "role": [u.role for u in found],
            "sign-in": ["password" if u.has_password else "oidc" for u in found],
            "created (UTC)": [u.created_at for u in found],
        }
    ),
    hide_index=True,
    key="users_table",
)


with st.form("user_add", clear_on_submit=True):
    st.subheader("Add a user")
    name_col, role_col = st.columns(2)
    name = name_col.text_input("Name", key="user_name")
    role = role_col.selectbox("Role", ROLES, key="user_role")
    password = st.text_input("Password (at least 8 characters)", type="password", key="user_pw")
    oidc_only = st.checkbox("Signs in through OIDC only (no password)", key="user_oidc")
    if st.form_submit_button("Add user"):
        try:
            people.add_user(name.strip(), role, None if oidc_only else password)
        except UserError as exc:
            st.error(str(exc))
        else:
            st.session_state["users_done"] = f"User {name.strip()} added ({role})."
            st.rerun()

names = [u.name for u in found]
if names:
    st.subheader("Change a user")
    who_col, new_col = st.columns(2)
    who = who_col.selectbox("User", names, key="user_pick")
    new_role = new_col.selectbox("New role", ROLES, key="user_new_role")
    set_col, remove_col, _ = st.columns([1, 1, 3])
    if set_col.button("Set role", key="user_set_role"):
        people.set_role(who, new_role)
        st.session_state["users_done"] = f"User {who} is now {new_role}."
        st.rerun()
    if remove_col.button("Remove user", key="user_remove", disabled=who == visitor.name):
        people.remove_user(who)
        st.session_state["users_done"] = f"User {who} removed."
        st.rerun()

if done := st.session_state.pop("users_done", None):
    st.success(done)
