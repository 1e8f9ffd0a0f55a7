"""Beside ``engine.config``: the batch shape a config gets when it does not choose one
(``default_shape``), and the settings a valid config may hold that do less than they seem to
(``config_warnings`` says which, each as ``field: what happens``; ``ConfigWarning`` carries
them to the user)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import RunConfig


def default_shape(batch_size: int, schedule: str) -> dict:
    """``accept`` and ``merge_siblings`` of a config that sets neither (``SearchConfig._batched_default``)."""
    if batch_size <= 1:
        return {"accept": "all", "merge_siblings": False}
    return {"accept": "best" if schedule == "sync" else "all", "merge_siblings": True}


def narrow_for_one_at_a_time(search) -> None:
    """The batch a ``SearchConfig`` gets when its reflection LM answers one request at a time (the
    local model) and the config does not choose one: one parent per step, and 1x1 for a synchronous
    run that sets neither P nor K. Such an LM queues a step's reflections: one proposal per step
    builds on each improvement at once, for the same LM time per proposal, and the next one reflects
    on a new minibatch (the second of a 1x2 step read the same feedback)."""
    given = set(search.model_fields_set)  # a copy: setting a field adds it to the live set
    if "parents_per_step" not in given:
        search.parents_per_step = 1
    if not given & {"proposals_per_parent", "parents_per_step"} and search.schedule == "sync":
        wide = default_shape(search.batch_size, search.schedule)
        search.proposals_per_parent = 1
        if {k: getattr(search, k) for k in wide} == wide:  # the shape of the wide default: one proposal's
            for key, value in default_shape(1, search.schedule).items():  # (with one, neither setting acts)
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
