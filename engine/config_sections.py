"""Two sections of a run's config kept apart from ``engine.config``: ``[branch]`` (where a branch
came from, engine/branch.py) and ``[review]`` (what approving a candidate checks).

Both are ordinary config tables: a TOML file, the New run form (which carries them) and the
Python API write them like any other section, and they are stored with the run.
"""

from __future__ import annotations

from typing import Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class BranchConfig(_Strict):
    """A branch starts from candidates of another run, its *base run*: the first one is the
    config's ``seed_candidate``, the texts of the others are ``seeds`` (a seed population; each
    is validated and competes on the frontier from the start). Evaluations the base run recorded
    of the same text on the same example are reused when the evaluator is the same
    (``engine.reuse``)."""

    run: str = Field(min_length=1, max_length=32, description="the base run's id")
    candidates: list[str] = Field(min_length=1, description="the base run's candidates the branch starts from; "
                                                            "the first is seed_candidate")
    seeds: list[Union[str, dict[str, str]]] = Field(
        default_factory=list, description="the texts of candidates[1:], in order: the rest of the seed population")


class ReviewConfig(_Strict):
    min_held_out_gain: Optional[float] = Field(
        None, description="the held-out gain over the seed under which approving a candidate warns "
                          "(else the team's REFRACT_MIN_HELD_OUT_GAIN)")


def branch_problem(branch: Optional[BranchConfig], seed) -> Optional[str]:
    """What is wrong with ``[branch]`` against the config's ``seed_candidate``, as
    ``field: reason``; None when nothing is. Every seed has the seed's shape: one text, or the
    same named components."""
    if branch is None:
        return None
    if seed in (None, ""):
        return "seed_candidate: a branch starts from a candidate's text; give it as seed_candidate"
    if len(branch.seeds) != len(branch.candidates) - 1:
        return (f"branch.seeds: {len(branch.seeds)} text(s) for {len(branch.candidates) - 1} candidate(s) after the "
                "first; give the text of every candidate after the first, in order")
    for i, other in enumerate(branch.seeds):
        if isinstance(seed, dict) != isinstance(other, dict) or (isinstance(seed, dict) and set(seed) != set(other)):
            want = "named components " + ", ".join(sorted(seed)) if isinstance(seed, dict) else "one text"
            return f"branch.seeds.{i}: must have the seed's shape ({want}), as every member of a seed population"
    return None
