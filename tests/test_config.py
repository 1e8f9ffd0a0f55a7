"""engine.config: the run TOML of issue 2, validated; every error names the field and the reason."""

from __future__ import annotations

import json
import textwrap

import pytest

from engine.config import ConfigError, RunConfig, load_config, parse_config
from engine.runs import submit_run
from engine.sandbox import EvaluatorCompileError
from storage import repo

EVALUATOR = textwrap.dedent('''
    def evaluate(candidate, example):
        return float(example["answer"] in candidate), {"expected": example["answer"]}
''')

# issue 2 §2, verbatim except for the file contents it refers to
ISSUE_TOML = '''
name = "support-bot prompt"
objective = "..."                 # optional when a seed is given; alone, the reflection LM writes the seed
background = "..."                # optional domain context for the reflection prompt
seed_candidate = "..."            # a string, or a [seed_candidate] table of named components
evaluator_file = "evaluator.py"   # or: evaluator = """ ...python source... """
dataset_file = "train.jsonl"      # optional; JSONL, JSON (a list) or CSV
valset_file = "val.jsonl"         # optional; defaults to the dataset
testset_file = "test.jsonl"       # optional; never used by the search, evaluated on the final best only

[search]
parents_per_step = 2              # P
proposals_per_parent = 2          # K
minibatch_size = 3
selection = "pareto"              # pareto | best | epsilon_greedy | top_k_pareto
improvement = "strict"            # strict | improvement_or_equal
merge = false
seed = 0

[budget]
max_metric_calls = 500
max_cost_usd = 2.0
max_seconds = 3600
stop_at_score = 1.0

[reflection_lm]
model = "openai/gpt-4.1-mini"     # any litellm model string
api_base = "http://127.0.0.1:8000/v1"   # optional, for OpenAI-compatible servers
api_key_env = "OPENAI_API_KEY"    # name of the environment variable holding the key
temperature = 0.7
max_tokens = 2000

[executor]
workers = 4
'''


def _rows(prefix, n):
    return [{"id": f"{prefix}{i}", "question": f"q{i}", "answer": f"a{i}"} for i in range(n)]


def _jsonl(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture
def project(tmp_path):
    """The issue's config in its own folder, with the files it names."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "evaluator.py").write_text(EVALUATOR)
    (folder / "train.jsonl").write_text(_jsonl(_rows("t", 6)))
    (folder / "val.jsonl").write_text(_jsonl(_rows("v", 4)))
    (folder / "test.jsonl").write_text(_jsonl(_rows("x", 3)))
    (folder / "run.toml").write_text(ISSUE_TOML)
    return folder


def _minimal(**over):
    data = {"name": "n", "seed_candidate": "s", "evaluator": EVALUATOR, "dataset": _rows("t", 4)}
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}  # None: leave the key out


def _error(data, base=None) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, base)
    return str(info.value)


class TestIssueShape:
    def test_loads_from_another_working_directory(self, project, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)  # relative paths resolve against the config's folder, not the cwd
        cfg = load_config(project / "run.toml")
        assert cfg.name == "support-bot prompt"
        assert cfg.objective == "..." and cfg.background == "..." and cfg.seed_candidate == "..."
        assert cfg.evaluator == EVALUATOR and cfg.evaluator_file == "evaluator.py"
        assert [r["id"] for r in cfg.dataset] == ["t0", "t1", "t2", "t3", "t4", "t5"]
        assert [r["id"] for r in cfg.valset] == ["v0", "v1", "v2", "v3"]
        assert [r["id"] for r in cfg.testset] == ["x0", "x1", "x2"]
        s = cfg.search
        assert (s.parents_per_step, s.proposals_per_parent, s.minibatch_size, s.batch_size) == (2, 2, 3, 4)
        assert (s.selection, s.improvement, s.merge, s.seed) == ("pareto", "strict", False, 0)
        b = cfg.budget
        assert (b.max_metric_calls, b.max_cost_usd, b.max_seconds, b.stop_at_score) == (500, 2.0, 3600, 1.0)
        lm = cfg.reflection_lm
        assert (lm.model, lm.api_base, lm.api_key_env, lm.temperature, lm.max_tokens) == (
            "openai/gpt-4.1-mini", "http://127.0.0.1:8000/v1", "OPENAI_API_KEY", 0.7, 2000)
        assert cfg.executor.workers == 4
        assert cfg.mode == "generalization"

    def test_stored_config_is_self_contained_and_round_trips(self, project):
        cfg = load_config(project / "run.toml")
        stored = json.loads(json.dumps(cfg.stored()))
        assert stored["evaluator"] == EVALUATOR and len(stored["dataset"]) == 6
        assert RunConfig.model_validate(stored) == cfg

    def test_submitted_run_has_its_examples_by_split(self, project, sqlite_db):
        run_id = submit_run(sqlite_db, load_config(project / "run.toml"))
        by_split = {}
        for ex in repo.get_examples(sqlite_db, run_id):
            by_split.setdefault(ex.split, []).append(ex.key)
        assert by_split == {"train": [f"t{i}" for i in range(6)], "val": [f"v{i}" for i in range(4)],
                            "test": ["x0", "x1", "x2"]}
        assert repo.get_run(sqlite_db, run_id).status == "queued"

    def test_seed_candidate_table_of_components(self, project):
        text = ISSUE_TOML.replace('seed_candidate = "..."', "").replace(
            "[search]", '[seed_candidate]\nsystem_prompt = "Be brief."\nfew_shot = "Q: hi A: hello"\n\n[search]')
        (project / "multi.toml").write_text(text)
        cfg = load_config(project / "multi.toml")
        assert cfg.seed_candidate == {"system_prompt": "Be brief.", "few_shot": "Q: hi A: hello"}
        assert cfg.is_multi_component

    def test_inline_evaluator_and_relative_subfolder(self, project):
        (project / "data").mkdir()
        (project / "data" / "rows.json").write_text(json.dumps(_rows("j", 3)))
        text = (ISSUE_TOML.replace('evaluator_file = "evaluator.py"', f'evaluator = """{EVALUATOR}"""')
                .replace('dataset_file = "train.jsonl"', 'dataset_file = "data/rows.json"')
                .replace('valset_file = "val.jsonl"', "").replace('testset_file = "test.jsonl"', ""))
        (project / "inline.toml").write_text(text)
        cfg = load_config(project / "inline.toml")
        assert cfg.evaluator.strip() == EVALUATOR.strip() and cfg.evaluator_file is None
        assert [r["id"] for r in cfg.dataset] == ["j0", "j1", "j2"]
        assert cfg.mode == "multi-task"

    def test_csv_dataset(self, project):
        (project / "train.csv").write_text("id,question,answer\nc0,what?,yes\nc1,\"a, b\",no\n")
        cfg = parse_config(_minimal(dataset=None, dataset_file="train.csv"), project)
        assert cfg.dataset == [{"id": "c0", "question": "what?", "answer": "yes"},
                               {"id": "c1", "question": "a, b", "answer": "no"}]


class TestModes:
    def test_single_task_without_a_dataset(self, sqlite_db):
        cfg = parse_config(_minimal(dataset=None))
        assert cfg.mode == "single-task"
        run_id = submit_run(sqlite_db, cfg)
        [ex] = repo.get_examples(sqlite_db, run_id)
        assert (ex.key, ex.split, ex.payload) == ("task", "val", None)

    def test_multi_task_with_a_dataset(self):
        assert parse_config(_minimal()).mode == "multi-task"

    def test_generalization_with_a_valset(self):
        assert parse_config(_minimal(valset=_rows("v", 2))).mode == "generalization"

    def test_objective_alone_is_enough(self):
        cfg = parse_config(_minimal(seed_candidate=None, objective="Write a haiku about rain."))
        assert cfg.seed_candidate is None


class TestErrors:
    def test_unknown_field(self):
        assert _error(_minimal(search={"parents": 2})) == "search.parents: unknown field (check the spelling)"
        assert _error(_minimal(nmae="x")) == "nmae: unknown field (check the spelling)"

    def test_wrong_type(self):
        msg = _error(_minimal(search={"parents_per_step": "two"}))
        assert msg == "search.parents_per_step: must be a whole number, not 'two'"

    @pytest.mark.parametrize("field", ["parents_per_step", "proposals_per_parent", "minibatch_size"])
    def test_negative_or_zero_batch_shape(self, field):
        for value in (-1, 0):
            msg = _error(_minimal(search={field: value}))
            assert msg == f"search.{field}: must be at least 1, not {value}"

    def test_every_problem_is_listed(self):
        msg = _error(_minimal(search={"parents_per_step": 0, "selection": "random"}, budget={"max_cost_usd": -1}))
        lines = msg.splitlines()
        assert len(lines) == 3
        assert {line.split(":")[0] for line in lines} == {"search.parents_per_step", "search.selection",
                                                          "budget.max_cost_usd"}

    def test_bad_enum_names_the_choices(self):
        msg = _error(_minimal(search={"selection": "random"}))
        assert msg.startswith("search.selection: ") and "'pareto'" in msg and "'top_k_pareto'" in msg

    def test_empty_inline_dataset(self):
        assert _error(_minimal(dataset=[])) == "dataset: the dataset is empty; give at least one example or leave it out"
        assert _error(_minimal(valset=[])).startswith("valset: the valset is empty")

    def test_empty_dataset_file(self, tmp_path):
        (tmp_path / "train.jsonl").write_text("\n\n")
        msg = _error(_minimal(dataset=None, dataset_file="train.jsonl"), tmp_path)
        assert msg == f"dataset_file: {tmp_path / 'train.jsonl'}: the dataset is empty"

    def test_jsonl_with_bad_json_names_file_and_line(self, tmp_path):
        lines = [json.dumps(r) for r in _rows("t", 2)] + ['{"id": "t2", "answer": }', json.dumps(_rows("t", 1)[0])]
        (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
        msg = _error(_minimal(dataset=None, dataset_file="train.jsonl"), tmp_path)
        assert msg.startswith(f"dataset_file: {tmp_path / 'train.jsonl'}, line 3: not valid JSON")

    def test_json_with_bad_json_names_file_and_line(self, tmp_path):
        (tmp_path / "val.json").write_text('[\n {"id": 1},\n {"id": 2,,}\n]')
        msg = _error(_minimal(valset_file="val.json"), tmp_path)
        assert msg.startswith(f"valset_file: {tmp_path / 'val.json'}, line 3: not valid JSON")

    def test_json_that_is_not_a_list(self, tmp_path):
        (tmp_path / "val.json").write_text('{"id": 1}')
        assert "must be a list of examples, got dict" in _error(_minimal(valset_file="val.json"), tmp_path)

    def test_csv_with_an_extra_field_names_the_line(self, tmp_path):
        (tmp_path / "test.csv").write_text("id,answer\nx0,a\nx1,b,oops\n")
        msg = _error(_minimal(testset_file="test.csv"), tmp_path)
        assert msg == f"testset_file: {tmp_path / 'test.csv'}, line 3: more fields than the header has"

    def test_unknown_dataset_format(self, tmp_path):
        (tmp_path / "train.txt").write_text("a\nb\n")
        assert "unknown format 'txt'" in _error(_minimal(dataset=None, dataset_file="train.txt"), tmp_path)

    def test_missing_files(self, tmp_path):
        msg = _error({"name": "n", "seed_candidate": "s", "evaluator_file": "nope.py", "dataset_file": "nope.jsonl"},
                     tmp_path)
        assert f"evaluator_file: cannot read {tmp_path / 'nope.py'}: No such file or directory" in msg
        assert "dataset_file: cannot read" in msg and "nope.jsonl" in msg

    def test_missing_evaluator(self):
        msg = _error({"name": "n", "seed_candidate": "s"})
        assert msg.startswith("evaluator: missing")

    def test_evaluator_and_evaluator_file_together(self, tmp_path):
        (tmp_path / "e.py").write_text(EVALUATOR)
        assert _error(_minimal(evaluator_file="e.py"), tmp_path) == \
            "evaluator: give evaluator_file or evaluator, not both"

    def test_no_seed_and_no_objective(self):
        assert _error(_minimal(seed_candidate=None)).startswith(
            "seed_candidate: missing; give a seed_candidate, or an objective")

    def test_testset_without_dataset(self):
        assert _error(_minimal(dataset=None, testset=_rows("x", 2))).startswith("testset: a testset needs a dataset")

    def test_empty_seed_table(self):
        msg = _error(_minimal(seed_candidate={}))
        assert msg.startswith("seed_candidate") and "at least one component" in msg

    def test_api_key_value_instead_of_a_name_is_refused(self):
        msg = _error(_minimal(reflection_lm={"model": "openai/gpt-4.1-mini", "api_key_env": "sk-abc123"}))
        assert msg.startswith("reflection_lm.api_key_env: ") and "NAME of an environment variable" in msg

    def test_empty_model(self):
        assert _error(_minimal(reflection_lm={"model": "  "})).startswith("reflection_lm.model: ")

    def test_not_toml(self, tmp_path):
        (tmp_path / "bad.toml").write_text('name = "unterminated\n')
        with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
            load_config(tmp_path / "bad.toml")

    def test_unreadable_config(self, tmp_path):
        with pytest.raises(ConfigError, match=r"missing\.toml: cannot read"):
            load_config(tmp_path / "missing.toml")


class TestEvaluatorSource:
    def test_syntax_error_names_file_and_line_at_submit(self, sqlite_db):
        source = "def evaluate(candidate, example):\n    x = (\n    return 1.0\n"
        cfg = parse_config(_minimal(evaluator=source))  # the config itself is valid
        with pytest.raises(EvaluatorCompileError, match=r"^evaluator: evaluator\.py, line \d+: "):
            submit_run(sqlite_db, cfg)
        assert repo.list_runs(sqlite_db) == []  # nothing stored

    def test_syntax_error_line_number(self, sqlite_db):
        source = "import math\n\ndef evaluate(candidate, example):\n    return math.pi +\n"
        with pytest.raises(EvaluatorCompileError) as info:
            submit_run(sqlite_db, parse_config(_minimal(evaluator=source)))
        assert str(info.value) == "evaluator: evaluator.py, line 4: invalid syntax"

    def test_no_evaluate_function(self, sqlite_db):
        with pytest.raises(EvaluatorCompileError, match="defines no function evaluate"):
            submit_run(sqlite_db, parse_config(_minimal(evaluator="def score(c):\n    return 1\n")))


class TestBudgetFeasibility:
    def test_too_small_names_the_minimum(self):
        # 4 validation examples (the dataset) + parent and child on a minibatch of 3 = 10
        msg = _error(_minimal(budget={"max_metric_calls": 9}))
        assert msg.startswith("budget.max_metric_calls: 9 is too small for even one step; the minimum is 10")

    def test_the_minimum_itself_is_accepted(self):
        assert parse_config(_minimal(budget={"max_metric_calls": 10})).budget.max_metric_calls == 10

    def test_minimum_uses_the_valset_and_a_minibatch_capped_by_the_dataset(self):
        # valset of 5; dataset of 2 caps the minibatch (size 3 asked) at 2: 5 + 2 * 2 = 9
        data = _minimal(dataset=_rows("t", 2), valset=_rows("v", 5), budget={"max_metric_calls": 8})
        assert "the minimum is 9" in _error(data)

    def test_single_task_minimum(self):
        assert "the minimum is 3" in _error(_minimal(dataset=None, budget={"max_metric_calls": 2}))

    def test_no_metric_call_cap(self):
        assert parse_config(_minimal(budget={"max_metric_calls": None, "max_steps": 3})).budget.max_steps == 3

    def test_zero_and_negative_budgets(self):
        assert _error(_minimal(budget={"max_metric_calls": 0})).startswith("budget.max_metric_calls: ")
        assert _error(_minimal(budget={"max_seconds": 0})).startswith("budget.max_seconds: ")
        assert _error(_minimal(budget={"max_steps": 0})).startswith("budget.max_steps: ")


def test_example_ids_come_from_rows_and_duplicates_stay_distinct(sqlite_db):
    cfg = parse_config(_minimal(dataset=[{"id": "a", "answer": "1"}, {"answer": "2"}, {"id": "a", "answer": "3"}],
                                valset=[{"id": "a", "answer": "4"}]))
    keys = [(e.key, e.split) for e in repo.get_examples(sqlite_db, submit_run(sqlite_db, cfg))]
    assert keys[0] == ("a", "train") and keys[1] == ("train-1", "train")
    assert len({k for k, _ in keys}) == 4



class TestFileEncodings:
    """Files saved by spreadsheet programs and Windows editors: a UTF-8 byte-order mark, or not
    UTF-8 at all."""

    def test_csv_with_a_byte_order_mark(self, tmp_path):
        (tmp_path / "train.csv").write_bytes("id,answer\nc0,yes\n".encode("utf-8-sig"))
        cfg = parse_config(_minimal(dataset=None, dataset_file="train.csv"), tmp_path)
        assert cfg.dataset == [{"id": "c0", "answer": "yes"}]  # not {"\ufeffid": ...}

    def test_jsonl_with_a_byte_order_mark(self, tmp_path):
        (tmp_path / "train.jsonl").write_bytes(b"\xef\xbb\xbf" + _jsonl(_rows("t", 2)).encode())
        cfg = parse_config(_minimal(dataset=None, dataset_file="train.jsonl"), tmp_path)
        assert [r["id"] for r in cfg.dataset] == ["t0", "t1"]

    def test_evaluator_file_with_a_byte_order_mark(self, tmp_path, sqlite_db):
        (tmp_path / "evaluator.py").write_bytes(EVALUATOR.encode("utf-8-sig"))
        data = _minimal(evaluator=None, evaluator_file="evaluator.py")
        submit_run(sqlite_db, parse_config(data, tmp_path))  # compiles

    def test_dataset_that_is_not_utf8_names_the_file(self, tmp_path):
        (tmp_path / "train.csv").write_bytes("id,answer\nc0,café\n".encode("latin-1"))
        msg = _error(_minimal(dataset=None, dataset_file="train.csv"), tmp_path)
        assert msg.startswith(f"dataset_file: {tmp_path / 'train.csv'}") and "UTF-8" in msg

    def test_evaluator_that_is_not_utf8_names_the_file(self, tmp_path):
        (tmp_path / "evaluator.py").write_bytes("# café\n".encode("latin-1") + EVALUATOR.encode())
        msg = _error(_minimal(evaluator=None, evaluator_file="evaluator.py"), tmp_path)
        assert msg.startswith("evaluator_file: ") and "UTF-8" in msg


def test_valset_without_a_dataset_is_refused():
    """The engine would search on the valset's examples while the mode said single-task."""
    assert _error(_minimal(dataset=None, valset=_rows("v", 3))).startswith("valset: a valset needs a dataset")


def test_samples_of_one_prompt_by_default_on_the_local_model_and_one_proposal_on_another_serial_lm():
    base = {"name": "x", "seed_candidate": "s", "evaluator": "def evaluate(c):\n    return 1.0\n"}
    local = parse_config(base).search  # the local model, the default reflection LM
    assert (local.parents_per_step, local.proposals_per_parent, local.accept, local.merge_siblings) == (1, 3, "best", False)
    serial = parse_config({**base, "reflection_lm": {"model": "openai/gpt-4.1-mini", "max_concurrency": 1}}).search
    assert (serial.parents_per_step, serial.proposals_per_parent, serial.accept, serial.merge_siblings) == (1, 1, "all", False)
    hosted = parse_config({**base, "reflection_lm": {"model": "openai/gpt-4.1-mini"}}).search
    assert (hosted.parents_per_step, hosted.proposals_per_parent, hosted.accept, hosted.merge_siblings) == (2, 2, "best", True)
    assert parse_config({**base, "search": {"proposals_per_parent": 2}}).search.batch_size == 2  # K given: P = 1
    two = parse_config({**base, "search": {"parents_per_step": 2}}).search  # P given: K keeps its default
    assert (two.batch_size, two.accept, two.merge_siblings) == (4, "best", False)  # no merge on the local model
    kept = parse_config({**base, "search": {"accept": "top_k", "top_k": 1}}).search  # a rule given is kept
    assert (kept.batch_size, kept.accept, kept.merge_siblings) == (3, "top_k", False)
    merged = parse_config({**base, "search": {"merge_siblings": True}}).search  # even the wide default's value
    assert (merged.batch_size, merged.accept, merged.merge_siblings) == (3, "all", True)
    assert parse_config({**base, "search": {"parents_per_step": 3}}).search.parents_per_step == 3  # given: kept
    stored = parse_config(base).stored()["search"]
    hosted = {**base, "search": stored, "reflection_lm": {"model": "openai/gpt-4.1-mini"}}
    assert parse_config(hosted).search.batch_size == 3  # a stored config keeps the shape it ran with


def test_a_wide_step_defaults_to_the_shape_that_keeps_quality_unless_the_config_chooses(tmp_path):
    """P × K > 1 with neither accept nor merge_siblings set: siblings merged, the best validated
    if the merge fails (asynchronously every child: the only rule there). A config file that sets
    either keeps what it says, and so does a stored config read back (a resumed run)."""
    from tests.support.harness import toy_data

    def shape(search: dict, **over) -> tuple[str, bool]:
        data = toy_data()
        data["search"] = {"minibatch_size": 3, **search}
        s = parse_config({**data, **over}).search
        return s.accept, s.merge_siblings

    assert shape({"parents_per_step": 4, "proposals_per_parent": 1}) == ("best", True)
    assert shape({}) == ("best", True)  # the default 2×2
    assert shape({"parents_per_step": 1, "proposals_per_parent": 1}) == ("all", False)
    assert shape({"parents_per_step": 4, "proposals_per_parent": 1, "schedule": "async"}) == ("all", True)
    assert shape({"parents_per_step": 4, "proposals_per_parent": 1, "accept": "all"}) == ("all", False)
    assert shape({"parents_per_step": 4, "proposals_per_parent": 1, "merge_siblings": False}) == ("all", False)
    (tmp_path / "run.toml").write_text(textwrap.dedent('''
        name = "t"
        seed_candidate = "x"
        evaluator = "def evaluate(candidate):\\n    return 1.0\\n"
        [search]
        parents_per_step = 4
        proposals_per_parent = 1
        accept = "all"
        '''))
    cfg = load_config(tmp_path / "run.toml")
    assert (cfg.search.accept, cfg.search.merge_siblings) == ("all", False)
    stored = RunConfig.model_validate(parse_config(toy_data(search={"accept": "top_k"})).model_dump(mode="json"))
    assert (stored.search.accept, stored.search.merge_siblings) == ("top_k", False)


def test_the_new_run_form_shows_the_shape_a_file_without_those_keys_runs():
    from ui import keys as K
    from ui.run_form import draft_from_config
    from ui.speedup import shape_note

    hosted = {"reflection_lm": {"model": "openai/gpt-4.1-mini"}}
    d = draft_from_config({"search": {"parents_per_step": 4, "proposals_per_parent": 1}, **hosted})
    assert (d[K.NEW_ACCEPT], d[K.NEW_MERGE_SIBLINGS]) == ("best", True)
    d = draft_from_config({"search": {"parents_per_step": 4, "proposals_per_parent": 1, "accept": "all"}, **hosted})
    assert (d[K.NEW_ACCEPT], d[K.NEW_MERGE_SIBLINGS]) == ("all", False)
    d = draft_from_config({"search": {"parents_per_step": 4, "proposals_per_parent": 1}})  # the local model
    assert (d[K.NEW_ACCEPT], d[K.NEW_MERGE_SIBLINGS]) == ("best", False)
    d = draft_from_config({})  # neither P nor K: samples of one prompt on the local model, 2x2 on a hosted one
    assert (d[K.NEW_P], d[K.NEW_K], d[K.NEW_ACCEPT], d[K.NEW_MERGE_SIBLINGS]) == (1, 3, "best", False)
    assert (draft_from_config(hosted)[K.NEW_P], draft_from_config(hosted)[K.NEW_K]) == (2, 2)
    model = "openai/gpt-4.1-mini"
    assert "the default for this P × K" in shape_note(4, 1, "best", True, "sync", model)
    assert "the default" not in shape_note(4, 1, "all", False, "sync", model).split(". With")[0]
    local = shape_note(1, 3, "best", False, "sync")
    assert "the default for this P × K" in local and "samples of one prompt" in local
    assert "the default" not in shape_note(1, 3, "best", True, "sync").split(". On")[0]
