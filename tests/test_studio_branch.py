"""Branches, comparing runs and "is the gain real?" in the studio (AppTest, local mode), on one
real toy run and a branch of it: Branch from here fills the New run form with the branch, which
can be made an ordinary run again; the Approve dialog warns under the minimum held-out gain; the
dashboard and the lineage link a branch and its base run; Compare runs puts them side by side."""

from __future__ import annotations

import engine  # noqa: F401  first: offline litellm price map
import pytest

from engine.branch import branch_run
from storage import repo
from storage.db import open_db
from tests.support import toy
from tests.support.harness import run_optimizer, run_toy, toy_config
from tests.support.scripted_lm import install_script, uninstall_script
from tests.support.studio import open_page
from ui import keys as K, run_form
from ui.lineage import lineage_figure
from ui.lineage_runs import candidate_of, joined_figure

TEST = [{"id": "te0", "word": toy.WORDS[0]}, {"id": "te1", "word": toy.WORDS[7]}, {"id": "te2", "word": "zulu"}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(database url, base run, its branch), both finished; the base run asks a held-out gain of 0.9."""
    tmp = tmp_path_factory.mktemp("studio-branch")
    url = f"sqlite:///{tmp / 'studio.db'}"
    db = open_db(url)
    cfg = toy_config(8, testset=TEST, review={"min_held_out_gain": 0.9}, budget={"max_steps": 1, "stop_at_score": None})
    base_id, _ = run_toy(db, tmp / "base", cfg)
    branch_id = branch_run(db, base_id, None, {"search.parents_per_step": 1, "budget.max_steps": 2})
    install_script(toy.script)
    run_optimizer(db, branch_id, tmp / "branch")
    uninstall_script()
    yield url, db, base_id, branch_id, tmp
    db.dispose()


@pytest.fixture
def studio(runs, monkeypatch):
    url, db, base_id, branch_id, tmp = runs
    monkeypatch.setenv("REFRACT_DB", url)
    monkeypatch.setenv("REFRACT_DATA", str(tmp))
    return db, base_id, branch_id


def _texts(at) -> str:
    return " ".join(str(getattr(e, "value", "")) for kind in ("markdown", "caption", "info", "warning", "error")
                    for e in getattr(at, kind))


def test_branch_from_here_opens_the_form_filled_with_the_branch(studio):
    db, base_id, _ = studio
    best = repo.get_run(db, base_id).best_candidate_id
    at = open_page("pages/candidate.py", run=base_id, candidate=best)
    at.button(key=K.BRANCH_SEND.format(where="candidate")).click().run()
    assert not at.exception
    draft = at.session_state["_new_draft"]
    assert draft[K.NEW_BRANCH] == {"run": base_id, "candidates": [best], "seeds": []}
    assert draft[K.NEW_SEED_TEXT] == repo.get_candidate(db, best).content["text"]
    assert f"A branch of run `{base_id}`" in _texts(at)
    cfg, errors = run_form.validate(draft)
    assert not errors and cfg.branch.run == base_id  # Start run submits a branch
    at.button(key=K.NEW_UNBRANCH).click().run()
    assert at.session_state["_new_draft"][K.NEW_BRANCH] is None and "A branch of run" not in _texts(at)


def test_the_approve_dialog_warns_under_the_minimum_held_out_gain(studio):
    db, base_id, _ = studio
    best = repo.get_run(db, base_id).best_candidate_id
    at = open_page("pages/candidate.py", run=base_id, candidate=best)
    warnings = [w.value for w in at.warning]
    assert any("is below the run's [review] min_held_out_gain, +0.900" in w for w in warnings), warnings


def test_a_branch_and_its_base_run_link_each_other_and_compare(studio):
    db, base_id, branch_id = studio
    dash = open_page("pages/dashboard.py", run=branch_id)
    assert f"A branch of run `{base_id}`" in _texts(dash) and "reused from it, not charged" in _texts(dash)
    assert "branch(es) of this run" in _texts(open_page("pages/dashboard.py", run=base_id))
    lin = open_page("pages/lineage.py", run=branch_id)
    lin.selectbox(key=K.LIN_BOTH_TREES).select(base_id).run()
    assert not lin.exception
    cmp = open_page("pages/compare_runs.py", runs=f"{base_id},{branch_id}")
    tables = [t.value for t in cmp.dataframe]
    held_out, diff = tables[0], tables[-1]
    assert list(held_out["run"]) == [base_id, branch_id] and held_out["held-out gain"].notna().all()
    row = diff.set_index("setting").loc["search.parents_per_step"]
    assert (row[base_id], row[branch_id]) == ("2", "1")


def test_the_joined_lineage_marks_the_branch_point_and_opens_either_run(studio):
    from storage import queries

    db, base_id, branch_id = studio
    base, branch = repo.get_run(db, base_id), repo.get_run(db, branch_id)
    figs = [lineage_figure(queries.candidate_rows(db, r.id), r.best_candidate_id, []) for r in (base, branch)]
    seed = next(c.id for c in repo.list_candidates(db, branch_id) if c.origin == "seed")
    fig = joined_figure(figs[0], base_id, figs[1], branch_id, {seed: branch.config["branch"]["candidates"][0]},
                        ("base", "branch"))
    link = next(t for t in fig.data if t.name == "branch point → seed")
    assert len(link.x) == 3 and link.x[0] != link.x[1]  # from the base candidate to the seed
    assert any(a.text == "branch point" for a in fig.layout.annotations)
    points = {c for t in fig.data if t.customdata is not None for c in t.customdata}
    assert candidate_of(f"{branch_id}:{seed}", base_id) == (branch_id, seed) and f"{branch_id}:{seed}" in points
