"""The new-run form's speed-up prediction: one adapter over ``engine.runtime.model`` so that the
page does not depend on that module's data classes, the form's panel that shows it, and the
sentence saying which batch shape the form's settings run."""

from __future__ import annotations

import streamlit as st

from engine.config import LOCAL_MODEL, default_shape
from engine.lm.providers import is_local
from engine.runtime.model import Latencies, Shape, predict_speedup, predict_step_speedup
from ui import keys as K


def predicted(parents: int, per_parent: int, workers: int, accept_rate: float, lm_seconds: float,
              eval_seconds: float, minibatch: int, n_val: int, accept_rule: str = "all") -> tuple[float, float]:
    """(step speed-up T(1)·k/T(k) of docs/design.md §5, metric-call throughput relative to 1×1)."""
    shape = Shape(parents=parents, per_parent=per_parent, accept=accept_rule)
    lat = Latencies(lm=lm_seconds, eval=eval_seconds, accept=accept_rate, minibatch=minibatch, n_val=n_val,
                    workers=workers)
    return predict_step_speedup(shape, lat), predict_speedup(shape, lat)


def estimate_panel(splits) -> None:
    """The form's prediction for its batch shape, at latencies the user assumes; ``splits`` are
    the form's dataset splits (train, val, test), or None while it has none."""
    a1, a2, a3 = st.columns(3)
    acc = a1.slider("assumed acceptance rate", 0.05, 1.0, 0.3, 0.05, key="new_assume_accept")
    l_ref = a2.number_input("reflection latency (s)", 0.5, 600.0, 20.0 if "local" in st.session_state[K.NEW_MODEL] else 6.0,
                            key="new_assume_reflect")
    t_ev = a3.number_input("one evaluation (s)", 0.01, 600.0, 0.5, key="new_assume_eval")
    n_val = max(1, len((splits[1] or splits[0]) if splits else []))
    shape = [st.session_state.get(k) for k in (K.NEW_P, K.NEW_K, K.NEW_WORKERS, K.NEW_MINIBATCH)]
    if not all(isinstance(v, (int, float)) and v >= 1 for v in shape):
        st.caption("Give P, K, workers and the minibatch size (each at least 1) to see the estimate.")
        return
    k_ = int(st.session_state[K.NEW_P]) * int(st.session_state[K.NEW_K])
    step_sp, call_sp = predicted(int(st.session_state[K.NEW_P]), int(st.session_state[K.NEW_K]),
                                 int(st.session_state[K.NEW_WORKERS]), acc, l_ref, t_ev,
                                 int(st.session_state[K.NEW_MINIBATCH]), n_val, st.session_state[K.NEW_ACCEPT])
    m1, m2 = st.columns(2)
    m1.metric(f"One step of {k_} proposals vs {k_} sequential steps", f"{step_sp:.2f}×")
    m2.metric("Metric calls per second vs 1×1", f"{call_sp:.2f}×")
    st.caption("How the estimate works: the k proposals of a step reflect at the same time, so a step costs about one "
               "reflection plus its evaluations, spread over the W workers; each improving child (the acceptance "
               "rate) then pays a validation pass. The more evaluations of a step fit on the workers at once, the "
               "closer the step comes to doing k proposals in the time of one. The dashboard shows the measured "
               "speed-up next to this prediction once the run has steps."
               + (" With the built-in local model the estimate is optimistic: it answers one request at a time, so a "
                  "step's reflections queue (siblings share their prompt, so the later ones cost little more than "
                  "their answer)." if is_local(st.session_state[K.NEW_MODEL]) else ""))


def shape_note(p: int, k: int, accept: str, merge_siblings: bool, schedule: str, model: str = "") -> str:
    """What the form's batch shape validates, in words, and whether it is the default for its P × K
    with the reflection LM ``model``."""
    n = max(1, int(p or 1)) * max(1, int(k or 1))
    local = is_local(model or LOCAL_MODEL)
    if n == 1:
        what = "one proposal a step: an improving child is validated"
    elif schedule == "async":
        what = ("each improving child merged with the current best, and the merge validated" if merge_siblings
                else "every improving child validated as it arrives")
    else:
        chosen = {"all": "every improving child", "best": "the best improving child",
                  "top_k": "the top k improving children"}.get(accept, accept)
        what = (f"the improving children of a step merged into one and validated when it keeps every gain, else {chosen}"
                if merge_siblings else f"{chosen} of a step validated")
    default = default_shape(n, schedule, local)
    is_default = default["merge_siblings"] == bool(merge_siblings) and (schedule == "async" or default["accept"] == accept)
    if n == 1:
        why = "."
    elif local and schedule == "sync":
        why = (". On the built-in local model a step's K proposals are samples of one prompt, which it reads once: "
               "each sample after the first costs only its answer. The best improving one is validated; siblings are "
               "not merged by default (a merge on a conflict is one more long call).")
    else:
        why = (". With P × K > 1 the default merges the improving siblings and validates the best if the merge fails: "
               "validating every improving child of a wide step lost quality at the same budget "
               "(docs/benchmarks-batching.md).")
    return f"Shape used: {p}×{k}, {what}" + (" — the default for this P × K" if is_default else "") + why
