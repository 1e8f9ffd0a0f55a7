"""Roles: who may do what. Admins grant and revoke roles here (on top of the secrets file's
``[roles]`` table, which stays the bootstrap) and read the record of run deletions, role changes
and refused actions. Everyone else sees their own role and why the page is closed to them."""

from __future__ import annotations

import streamlit as st

from engine.admin import grants as list_grants
from ui import admin, data, identity, keys
from ui.render import md
from ui.steering import show_outcome

st.title("Roles")
actor = identity.current_actor()
signed_in = identity.auth_configured()
if actor is None:  # local mode, no name yet: every change here records who made it
    st.info("Enter your name under “Who am I” in the sidebar first: role changes record who made them.")
    st.stop()
st.caption(f"You: **{md(actor.name)}** · {actor.role.label if actor.role.value else 'no role'}" + ("" if signed_in else f" ({identity.LOCAL_MODE})"))
note = identity.refusal_note("manage_roles")
if note:
    st.info(note, icon=":material/block:")
    st.stop()

st.write("A person gets the **highest role any rule gives them**, whether the rule is in the `[roles]` table of "
         "the secrets file or granted here; anyone no rule names gets the table's `default`. Grants only add: the "
         "file's admins stay admins whatever happens here (edit the file to change its rules). "
         "**viewer**: read and comment · **editor**: also create, steer and approve runs · **admin**: also delete "
         "runs and manage roles.")
if not signed_in:
    st.warning("Sign-in is not configured: everyone here is an admin, and grants take effect once it is.",
               icon=":material/info:")

file_rules = identity.file_roles()
grants = list_grants(data.get_db())
st.subheader("Who is what")
st.dataframe(admin.rules_table(file_rules, grants), hide_index=True, width="stretch")
st.caption(f"Anyone no rule names: **{file_rules.default.label if file_rules.default.value else 'turned away'}**"
           + (f" · rules without @ match values of the ID-token claim `{file_rules.claim}`" if file_rules.claim else ""))
admin.check_person(file_rules.with_grants((g.rule, g.role) for g in grants))

st.subheader("Grant or revoke")
admin.grant_form()
admin.revoke_control(grants)
show_outcome(keys.ROLES_OUTCOME)

st.subheader("Record", help="Run deletions and role changes (they outlive the run or grant they name), then refused "
             "actions.")
admin.record(actor)
