"""Admin controls in the studio: deleting a run (on its dashboard) and the Roles page's grant,
revoke and record. Every action goes through ``engine.admin``, which checks the role itself and
records what was done; the controls are drawn disabled for anyone else, with the reason.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine import admin
from engine.access import Refused
from storage import access as access_store
from storage.errors import StorageError
from storage.states import FINISHED
from ui import data, identity, interventions as iv, keys, nav
from ui.render import md
from ui.steering import show_outcome


def delete_box(run: dict) -> None:
    """Delete this run, after typing its id; admins only, finished runs only."""
    run_id = run["id"]
    with st.expander("Delete this run", icon=":material/delete_forever:"):
        note = identity.refusal_note("delete_run")
        if run["status"] not in FINISHED:
            st.caption(f"The run is {run['status']}: stop it first (Stop, above), then delete it.")
        st.write("Deletes the run with its candidates, evaluations, LM calls, steps, commands and comments, for "
                 "everyone. It cannot be undone; the deletion itself is recorded (who, when, which run).")
        branched = admin.branches_note(data.get_db(), run_id)
        if branched:
            st.warning(branched[:1].upper() + branched[1:] + ".", icon=":material/call_split:")
        confirm = st.text_input(f"Type the run id `{run_id}` to confirm", key=keys.DELETE_CONFIRM.format(run=run_id))
        reason = st.text_input("Why (recorded)", key=keys.DELETE_REASON.format(run=run_id))
        ready = confirm.strip() == run_id and run["status"] in FINISHED and note is None
        if st.button("Delete the run", key=keys.DELETE_SEND.format(run=run_id), type="primary",
                     icon=":material/delete_forever:", disabled=not ready):
            if _delete(run_id, reason):
                nav.go("runs")
        if note:
            st.caption(note)
        show_outcome(keys.DELETE_OUTCOME.format(run=run_id))


def _delete(run_id: str, reason: str) -> bool:
    actor = identity.current_actor()
    if actor is None:
        st.session_state[keys.DELETE_OUTCOME.format(run=run_id)] = iv.Outcome(False, iv.NO_NAME)
        return False
    try:
        counts = admin.delete_run(data.get_db(), run_id, actor, reason.strip())
    except (Refused, StorageError) as exc:
        st.session_state[keys.DELETE_OUTCOME.format(run=run_id)] = iv.Outcome(False, str(exc))
        return False
    st.session_state[keys.DELETED_NOTE] = f"Run {run_id} deleted ({sum(counts.values()) + 1} rows); the deletion is " \
                                          "recorded on the Roles page."
    st.cache_data.clear()  # every cached read may hold rows of the run
    return True


def deleted_note() -> None:
    """On the Runs page, once: which run was just deleted."""
    note = st.session_state.pop(keys.DELETED_NOTE, None)
    if note:
        st.success(note, icon=":material/delete_forever:")


def grant_form() -> None:
    """Grant a role to an e-mail address, an @domain or a claim value."""
    with st.form(keys.ROLES_GRANT, clear_on_submit=True, border=True):
        c1, c2 = st.columns([3, 1])
        rule = c1.text_input("E-mail address, @domain or claim value", key=keys.ROLES_RULE,
                             placeholder="ana@example.com, @lab.example.com or refract-editors")
        role = c2.selectbox("Role", admin.GRANTABLE, index=1, key=keys.ROLES_ROLE)
        reason = st.text_input("Why (recorded)", key=keys.ROLES_REASON)
        if st.form_submit_button("Grant", icon=":material/person_add:", type="primary"):
            _act(lambda actor: admin.grant(data.get_db(), rule, role, actor, reason.strip()),
                 lambda before: f"{admin.normalise_rule(rule)} is now {role}" + (f" (was {before})." if before else "."))


def revoke_control(grants: list) -> None:
    if not grants:
        return
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    pick = c1.selectbox("Revoke a grant", [g.rule for g in grants], index=None, key=keys.ROLES_REVOKE_PICK,
                        placeholder="pick a rule")
    if c2.button("Revoke", key=keys.ROLES_REVOKE, icon=":material/person_remove:", disabled=pick is None):
        _act(lambda actor: admin.revoke(data.get_db(), pick, actor, ""),
             lambda was: f"{pick}: grant of {was} removed.")


def _act(action, message) -> None:
    """Run an admin action as the current person; its outcome is shown under the controls."""
    try:
        result = action(identity.current_actor())
    except (Refused, admin.AdminError, StorageError) as exc:
        out = iv.Outcome(False, str(exc))
    else:
        st.session_state[keys.ROLES_OUTCOME] = iv.Outcome(True, message(result))
        data.role_grants.clear()
        st.rerun()  # the tables above were drawn before the change
    st.session_state[keys.ROLES_OUTCOME] = out


def rules_table(file_rules, grants: list) -> pd.DataFrame:
    """Every rule that gives a role: the secrets file's and the database's grants."""
    rows = [{"rule": rule, "role": role.label, "from": "secrets file", "by": "", "when": ""}
            for role, rules in file_rules.rules.items() for rule in rules]
    rows += [{"rule": g.rule, "role": g.role, "from": "grant", "by": g.granted_by,
              "when": f"{g.created_at:%Y-%m-%d %H:%M} UTC"} for g in grants]
    return pd.DataFrame(rows, columns=["rule", "role", "from", "by", "when"])


def record(actor) -> None:
    """Run deletions, role changes and refused actions, newest first."""
    db = data.get_db()
    actions = admin.admin_actions(db, actor)
    st.dataframe(pd.DataFrame([{"when": a.created_at, "who": a.actor, "what": a.action, "subject": a.subject,
                                "detail": a.detail, "why": a.reason} for a in actions],
                              columns=["when", "who", "what", "subject", "detail", "why"]),
                 hide_index=True, width="stretch", height=min(320, 38 + 35 * max(1, len(actions))),
                 column_config={"when": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss")})
    refusals = access_store.list_refusals(db, limit=200)
    st.caption(f"Refused actions ({len(refusals)} shown, newest first)")
    st.dataframe(pd.DataFrame([{"when": r.created_at, "who": r.actor, "role": r.role, "action": r.action,
                                "run": r.run_id, "why": r.reason} for r in refusals],
                              columns=["when", "who", "role", "action", "run", "why"]),
                 hide_index=True, width="stretch", height=min(320, 38 + 35 * max(1, len(refusals))),
                 column_config={"when": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
                                "why": st.column_config.TextColumn(width="large")})


def check_person(roles) -> None:
    """Which role an address gets now, from every rule."""
    email = st.text_input("Check an address", key=keys.ROLES_CHECK, placeholder="someone@example.com")
    if email.strip():
        role = roles.role_of(email.strip())
        st.write(f"{md(email.strip())} → **{role.label if role.value else 'no role (turned away)'}**"
                 + (" (claims such as groups are known only at sign-in)" if roles.claim else ""))
