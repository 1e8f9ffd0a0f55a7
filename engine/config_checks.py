"""Beside ``engine.config``: the batch shape a config gets when it does not choose one
(``default_shape``), and the settings a valid config may hold that do less than they seem to
(``config_warnings`` says which, each as ``field: what happens``; ``ConfigWarning`` carries
them to the user)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import RunConfig


def default_shape(batch_size: int, schedule: str, reuses_prompt: bool = False) -> dict:
    """``accept`` and ``merge_siblings`` of a config that sets neither (``SearchConfig._batched_default``,
    then ``narrow_for_one_at_a_time``). ``reuses_prompt``: the reflection LM is the local model, where
    a sibling merge on a conflict is one more reflection-sized call of a prompt it has not read."""
    if batch_size <= 1:
        return {"accept": "all", "merge_siblings": False}
    if schedule == "sync" and reuses_prompt:
        return {"accept": "best", "merge_siblings": False}
    return {"accept": "best" if schedule == "sync" else "all", "merge_siblings": True}


# Proposals of one step on the local model: samples of one reflection prompt. The runtime reads a
# prompt once (its processed prefix is kept), so each sample after the first costs its answer
# only: on one core a first reflection took 8-16 s and each further sample 2-5 s. On the four
# development tasks 1x3 steps found more than 1x1 steps in the same time on every task
# (docs/benchmarks-real-lm.md).
SAMPLES = 3


def default_proposals(reuses_prompt: bool) -> int:
    """K of a synchronous run on an LM that answers one request at a time, when the config sets
    neither P nor K: ``SAMPLES`` on the local model, else one proposal per step."""
    return SAMPLES if reuses_prompt else 1


def narrow_for_one_at_a_time(search, reuses_prompt: bool) -> None:
    """The batch a ``SearchConfig`` gets when its reflection LM answers one request at a time and
    the config does not choose one: one parent per step; for a synchronous run that sets neither P
    nor K, ``default_proposals``; and the sibling rule ``default_shape`` gives that LM (on the local
    model the best improvement is validated and siblings are not merged: a merge on a conflict
    cost more than a step there). A value the config sets is kept."""
    given = search.given
    if "parents_per_step" not in given:
        search.parents_per_step = 1
    if not given & {"proposals_per_parent", "parents_per_step"} and search.schedule == "sync":
        search.proposals_per_parent = default_proposals(reuses_prompt)
    if not given & {"accept", "merge_siblings"} and not (search.schedule == "async" and search.merge):
        for key, value in default_shape(search.batch_size, search.schedule, reuses_prompt).items():
            setattr(search, key, value)


class ConfigWarning(UserWarning):
    """A config that is valid but probably not what the user meant."""


def config_warnings(cfg: RunConfig) -> list[str]:
    """Settings that are allowed but do less than they seem to, each as ``field: what happens``."""
    from engine.lm.images import mentions_images, supports_vision

    s = cfg.search
    out = []
    if s.accept == "top_k" and s.top_k >= s.batch_size:
        out.append(f"search.top_k: {s.top_k} is not smaller than the batch ({s.parents_per_step}×{s.proposals_per_parent} = "
                   f"{s.batch_size} proposals), so accept = \"top_k\" validates every improving child, like accept = \"all\"")
    if s.schedule == "async" and s.batch_size == 1:
        out.append("search.schedule: \"async\" with parents_per_step × proposals_per_parent = 1 keeps one proposal in "
                   "flight, which is the same as \"sync\"; raise the product to run several at once")
    if s.schedule == "async" and s.batch_size > 1 and s.merge and s.merge_siblings:
        out.append("search.merge: with schedule = \"async\" and merge_siblings = true, every improving child is "
                   "already merged into the current best before it is validated, so merge is not used; drop one")
    if s.acceptance is not None:
        out.append("search.acceptance: renamed search.improvement (a child has *improved* when it beats its parent on the "
                   "minibatch; *accepted* means validated); the old name is still read, rename it")
    if mentions_images(cfg.evaluator) and not supports_vision(cfg.reflection_lm.model):
        out.append(f"reflection_lm.model: {cfg.reflection_lm.model!r} cannot see images (litellm's supports_vision), "
                   "and the evaluator seems to return some: the reflection prompt will say each image was omitted; "
                   "choose a vision model to send them")
    return out
