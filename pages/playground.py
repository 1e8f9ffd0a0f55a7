"""Runtime playground: sliders for the batch shape and the latencies; the engine's own runtime
model (``engine.runtime.model`` / ``engine.runtime.sim``) predicts the wall-clock of a run and
the speed-up per metric call, for synchronous steps and for the asynchronous schedule."""

from __future__ import annotations

import streamlit as st

from engine.runtime.model import Latencies, slowest_lm
from ui import playground_chart as pc
from ui.teaching_keys import (PLAY_ACCEPT, PLAY_BUDGET, PLAY_EVAL, PLAY_K, PLAY_LM, PLAY_MINIBATCH, PLAY_P,
                              PLAY_SPREAD, PLAY_VAL, PLAY_W)

st.title("Runtime playground")
st.caption("Why does proposing several children per step make a run faster? Each reflection waits for the LM; "
           "the evaluations wait for the workers. Move the sliders to see which wait dominates, and what batching "
           "buys. The numbers come from the engine's own runtime model, the one it uses to predict each step.")

left, right = st.columns([1, 3], gap="large")
with left:
    p = st.slider("P, parents per step", 1, 8, 2, key=PLAY_P)
    k = st.slider("K, proposals per parent", 1, pc.MAX_K, 2, key=PLAY_K)
    w = st.slider("W, evaluation workers", 1, 32, 4, key=PLAY_W)
    lm = st.slider("LM latency (s per reflection)", 0.5, 60.0, 8.0, 0.5, key=PLAY_LM)
    spread = st.slider("LM latency spread", 0.0, 1.0, 0.0, 0.05, key=PLAY_SPREAD,
                       help="How much one reflection's latency differs from the next (the standard deviation of its "
                            "logarithm). 0: every call takes the LM latency above. 0.5: the slowest of four calls "
                            "made at once takes about 1.6× the average. `python -m engine status RUN` "
                            "shows a run's own.")
    ev = st.slider("Evaluator latency (s per metric call)", 0.05, 20.0, 0.5, 0.05, key=PLAY_EVAL)
    a = st.slider("Acceptance rate (children that improve)", 0.0, 1.0, 0.3, 0.05, key=PLAY_ACCEPT)
    n_val = st.slider("Validation set size", 1, 300, 30, key=PLAY_VAL)
    m = st.slider("Minibatch size", 1, 10, 3, key=PLAY_MINIBATCH)
    budget = st.slider("Budget (metric calls)", 100, 5000, 1000, 100, key=PLAY_BUDGET)

lat = Latencies(lm=lm, eval=ev, accept=a, minibatch=m, n_val=n_val, workers=w, lm_spread=spread)
table = pc.sweep(p, lat, budget)
step = pc.one_step(p, k, lat)
at = table[table["K"] == k].set_index("schedule")
with right:
    c = st.columns(4)
    c[0].metric("Run, sync", f"{at.at['sync', 'seconds'] / 60:.1f} min", help=f"{budget} metric calls, P={p}, K={k}")
    c[1].metric("Run, async", f"{at.at['async', 'seconds'] / 60:.1f} min")
    c[2].metric("Speed-up, sync", f"{at.at['sync', 'speedup']:.2f}×", help="seconds per metric call of 1×1 / of this shape")
    c[3].metric("Speed-up, async", f"{at.at['async', 'speedup']:.2f}×")
    st.plotly_chart(pc.figure(table, k), key="play_chart", width="stretch")
    slowest = slowest_lm(lat, p * k)  # what the step waits for its reflections: the slowest of them
    lm_share = slowest / step["seconds"] if step["seconds"] else 0.0
    st.markdown(f"One synchronous step of {p}×{k} = {p * k} proposals takes **{step['seconds']:.1f} s** for "
                f"{step['calls']:.0f} metric calls on average; a 1×1 step takes {step['seconds_1x1']:.1f} s for "
                f"{step['calls_1x1']:.0f}. The LM wait is {lm_share:.0%} of the step: it is "
                f"**{'LM-bound' if lm_share >= 0.5 else 'evaluator-bound'}**"
                + (" — batching shares that wait among all proposals." if lm_share >= 0.5 else
                   " — more workers help more than more proposals."))
    if spread > 0 and p * k > 1:
        st.markdown(f"With this spread the step waits **{slowest:.1f} s** for the slowest of its {p * k} reflections, "
                    f"against {lm:.1f} s for one on average; an asynchronous proposal waits only for its own, which is "
                    "where the asynchronous schedule gains most.")

st.subheader("The formula")
st.markdown("A synchronous step with $k = P \\cdot K$ proposals, minibatch $m$, validation set $V$, $W$ workers, "
            "LM latency $L$, evaluator latency $T$ and acceptance rate $a$:")
st.latex(r"T_{\text{step}} = \left\lceil \tfrac{P m}{W} \right\rceil T + L + \left\lceil \tfrac{k m}{W} \right\rceil T"
         r" + \mathbb{E}[n_v]\,\left\lceil \tfrac{V}{W} \right\rceil T,\qquad n_v \sim \min(\mathrm{Binomial}(k, a),\ \text{accept limit})")
st.markdown("The parents' minibatches, then all $k$ reflections at once (one LM wait, not $k$), then the children's "
            "minibatches, then one validation pass per improving child the accept rule keeps. Against $k$ "
            "sequential 1×1 steps, with $L_{\\text{step}}$ the time of a 1×1 step before validation, $L_{\\text{val}}$ "
            "one validation pass and $q_k$ the expected validation passes of a $k$-proposal step. When LM latencies "
            "vary, $L$ is the expected slowest of the step's $k$ calls:")
st.latex(r"\text{speed-up} \approx \frac{k\,(L_{\text{step}} + a\,L_{\text{val}})}{L_{\text{step}} + q_k\,L_{\text{val}}}")
st.markdown("The asynchronous schedule keeps $C = k$ proposals in flight with no barrier; each takes $L + E$ where "
            "the evaluation time $E = E_0 / (1-\\rho)$ stretches as the workers fill (utilisation "
            "$\\rho = X c T / W$ for throughput $X$ and $c$ metric calls per proposal). The curves above replay the "
            "whole run, budget tail included, with the engine's schedule simulator (`engine.runtime.sim`).")
