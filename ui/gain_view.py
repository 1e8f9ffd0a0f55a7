"""Is the gain real? in the studio: the held-out gain of a candidate over the seed with its paired
bootstrap interval, the examples it wins and loses and the validation–test gap
(``engine.gain``), on the dashboard (any candidate, the best first) and in the Approve dialog
(with the warnings approving it should hear)."""

from __future__ import annotations

from typing import Optional

import streamlit as st

from engine.gain import VERDICTS, Gain, held_out_gain
from ui import data, keys, nav
from ui.errors import shows_storage_errors
from ui.render import code_span

ICONS = {"real": ":material/check_circle:", "unclear": ":material/help:", "worse": ":material/trending_down:"}
OPTIONS = 200  # candidates the picker offers besides the best, best mean first (any other: on its own page)


@st.cache_data(ttl=30, show_spinner=False, max_entries=256)
def _gain(url: str, run_id: str, candidate_id: Optional[str], token: str) -> Optional[Gain]:
    return held_out_gain(data._db(url), run_id, candidate_id)


def gain_of(run: dict, candidate_id: Optional[str] = None) -> Optional[Gain]:
    # keyed by the frontier's token: a candidate's and the seed's scores change with a validation
    # pass or the test pass at the end (the status), not with each metric call
    return _gain(data.db_url(), run["id"], candidate_id, data.frontier_token(run))


@shows_storage_errors
def panel(run: dict) -> None:
    """The dashboard's section: pick a candidate (the best by default), see its gain."""
    cands = data.candidate_rows(data.db_url(), run["id"], data.version_token(run))
    if cands.empty:
        st.caption("No candidates yet.")
        return
    best = run.get("best_candidate_id")
    # the best and the next OPTIONS by mean: 5,000 options took a tenth of a second on every refresh
    scored = (cands[cands["val_mean"].notna() & (cands["origin"] != "seed")]
              .sort_values("val_mean", ascending=False).head(OPTIONS))
    options = ([best] if best else []) + [c for c in scored["id"] if c != best]
    if not options:
        st.caption("The gain over the seed appears once a candidate other than the seed is validated.")
        return
    # over the two columns, not the rows (itertuples took 0.15 s at 5,000 validated candidates)
    label = {c: f"{c} · val {m:.3f}" + (" · best" if c == best else "")
             for c, m in zip(scored["id"].tolist(), scored["val_mean"].tolist())}
    picked = st.selectbox("Candidate", options, format_func=lambda c: label.get(c, c), key=keys.GAIN_CANDIDATE,
                          help=f"the best by default, or one of the {OPTIONS} with the best validation means (any other's "
                               "gain is under *Approve this candidate* on its page); its held-out score exists when the "
                               "test pass evaluated it: the final best, and a branch's seeds")
    gain = gain_of(run, picked)
    if gain is None:
        st.caption("The seed and this candidate share no evaluated example yet.")
        return
    show(gain)
    if picked == best:
        nav.link("compare", "Compare the best with the seed, example by example", run=run["id"],
                 icon=":material/compare:")


def show(gain: Gain, compact: bool = False) -> None:
    """The gain, its interval, wins and losses, the gap; then the warnings."""
    title, icon = VERDICTS[gain.verdict], ICONS[gain.verdict]
    cols = st.columns(4)
    cols[0].metric("Held-out gain over the seed" if gain.held_out else "Validation gain (not held out)", f"{gain.gain:+.3f}",
                   f"95 % interval {gain.low:+.3f} … {gain.high:+.3f}", delta_color="off", delta_arrow="off",
                   help=f"mean of the candidate's score minus the seed's over the {gain.n} examples both were evaluated "
                        "on; the interval is a paired bootstrap of those differences (4,000 resamples)")
    cols[1].metric("Examples won / lost", f"{len(gain.wins)} / {len(gain.losses)}", f"{gain.ties} tied",
                   delta_color="off", delta_arrow="off")
    cols[2].metric("Validation–test gap", "—" if gain.gap is None else f"{gain.gap:+.3f}",
                   help="the candidate's validation mean minus its held-out test mean: how much of what the search "
                        "saw did not carry over (large and positive: overfitting)")
    cols[3].metric("Minimum gain to approve", "—" if gain.min_gain is None else f"{gain.min_gain:+.3f}",
                   {"run": "the run's [review]", "team": "the team's"}.get(gain.min_gain_from), delta_color="off",
                   delta_arrow="off", help="[review] min_held_out_gain of the run's config, else the team's "
                                           "REFRACT_MIN_HELD_OUT_GAIN; approving below it warns")
    st.markdown(f"{icon} **{title}** (95 % interval {gain.low:+.3f} … {gain.high:+.3f})",
                help="real: the whole interval is above 0; worse: below it")
    if not compact:
        st.caption(f"Wins: {_keys(gain.wins)} · Losses: {_keys(gain.losses)}")
    for warning in gain.warnings():
        st.warning(warning, icon=":material/warning:")


def _keys(names: list[str], limit: int = 30) -> str:
    return (", ".join(code_span(k) for k in names[:limit]) or "none") + (" …" if len(names) > limit else "")


@shows_storage_errors
def approve_note(run: dict, cand_id: str) -> None:
    """In the Approve dialog: is this candidate's gain over the seed real, and does it reach the
    minimum? Said before the button; approving stays possible."""
    gain = gain_of(run, cand_id)
    if gain is None:
        st.caption("This candidate and the seed share no evaluated example yet: nothing says whether it beats the seed.")
    elif gain.seed_id == cand_id:
        st.caption("This is the seed: there is no gain to measure.")
    else:
        st.markdown("**Is the gain real?**")
        show(gain, compact=True)
