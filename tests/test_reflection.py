"""engine.search.reflection: what the reflection prompt says, how it is shortened, and how the new
text is taken out of the LM's answer."""

from __future__ import annotations

import pytest

from types import SimpleNamespace

from engine.config import LOCAL_MODEL, LMConfig
from engine.search.proposal import reflection_lm
from engine.search.reflection import (CHANGE_ONLY, MIN_ANSWER_TOKENS, ExampleFeedback, answer_token_cap, build_prompt, parse_answer,
                                      render_feedback, seed_prompt)

CURRENT = "You are a support bot. Answer politely."


def _feedback(n=2, big=0):
    out = []
    for i in range(n):
        side = {"expected": f"answer-{i}", "output": f"got-{i}", "scores": {"tone": 0.5 + i / 10}}
        if big:
            side["log"] = f"LOG{i}:" + "x" * big
        out.append(ExampleFeedback(f"ex{i}", i / 2, {"question": f"q-{i}"}, side,
                                   error="Traceback: KeyError 'q'" if i == 0 else None))
    return out


def _prompt(**over):
    args = dict(kind="a system prompt for a chat model", objective="Resolve tickets in one reply.",
                background="Customers are airline passengers.", component="text", components=["text"],
                current_text=CURRENT, feedback=_feedback(), human_feedback=["Never promise refunds."],
                tried=["You are a bot.", "Answer politely, always."])
    args.update(over)
    p = build_prompt(**args)
    system, user = p.messages
    assert system["role"] == "system" and user["role"] == "user"
    return p, system["content"], user["content"]


class TestPrompt:
    def test_contains_every_ingredient(self):
        _, system, user = _prompt()
        assert "a system prompt for a chat model" in system
        assert "## Objective\nResolve tickets in one reply." in user
        assert "## Background\nCustomers are airline passengers." in user
        assert "which is a system prompt for a chat model" in user
        assert "## Current version\n```\n" + CURRENT + "\n```" in user
        # side information rendered as Markdown, per example, with the score and the error
        assert "### Example `ex0` — score 0" in user
        assert "### Example `ex1` — score 0.5" in user
        assert "**Error:**\n```\nTraceback: KeyError 'q'\n```" in user
        assert "**expected:**\n```\nanswer-0\n```" in user
        assert '"tone": 0.6' in user  # sub-scores as JSON
        assert '"question": "q-1"' in user  # the example's input
        assert "## Human feedback" in user and "- Never promise refunds." in user
        assert "## Already tried for this version (do not repeat these)" in user
        assert "You are a bot." in user and "Answer politely, always." in user

    def test_order_of_sections(self):
        _, _, user = _prompt()
        order = ["## Objective", "## Background", "## What you are improving", "## Current version",
                 "## Evaluation feedback", "## Human feedback", "## Already tried", "## Task"]
        positions = [user.index(s) for s in order]
        assert positions == sorted(positions)

    def test_optional_sections_are_left_out(self):
        _, _, user = _prompt(objective="", background="", human_feedback=[], tried=[], feedback=[])
        for s in ("## Objective", "## Background", "## Human feedback", "## Already tried"):
            assert s not in user
        assert "(no feedback)" in user

    def test_default_kind_when_none_given(self):
        _, system, user = _prompt(kind="  ")
        # the kind of the current version: a 1.5B model answered a regex with code using it
        assert "the same kind of text as the current version" in system and "a regular expression stays" in user
        assert user.count("a regular expression stays a regular expression") == 1

    def test_multi_component_names_the_component(self):
        _, _, user = _prompt(component="few_shot", components=["system_prompt", "few_shot"])
        assert "the component `few_shot` of a multi-part candidate (system_prompt, few_shot)" in user

    def test_current_text_containing_backticks_gets_a_longer_fence(self):
        text = "Use ```code``` blocks\n```\nls\n```"
        _, _, user = _prompt(current_text=text)
        assert "## Current version\n````\n" + text + "\n````" in user

    def test_only_the_last_three_tried_texts(self):
        _, _, user = _prompt(tried=["t1", "t2", "t3", "t4"])
        assert "t1" not in user and all(t in user for t in ("t2", "t3", "t4"))

    def test_not_shortened_when_it_fits(self):
        p, _, user = _prompt(max_chars=100_000)
        assert not p.shortened and "shortened" not in user


class TestConstantPrefix:
    """What is the same for every reflection of a run comes first, so that a local runtime can
    reuse the processed prefix from one call to the next."""

    def _text(self, p) -> str:
        return "".join(m["content"] for m in p.messages)

    def test_the_instructions_objective_background_and_kind_precede_everything_that_varies(self):
        one, _, _ = _prompt()
        other, _, _ = _prompt(current_text="A different parent.", feedback=_feedback(3),
                              human_feedback=["Be brief."], tried=["Something else."])
        a, b = self._text(one), self._text(other)
        shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        prefix = a[:shared]
        assert one.messages[0]["content"] in prefix  # the whole system message
        assert "rules of the task" in one.messages[0]["content"] and "Study the feedback" in one.messages[0]["content"]
        assert "`Change:`" not in one.messages[0]["content"]  # a small model answered that line alone
        for part in ("## Objective\nResolve tickets in one reply.", "## Background\nCustomers are airline passengers.",
                     "## What you are improving", "which is a system prompt for a chat model"):
            assert part in prefix
        assert a[shared:].startswith(CURRENT[0]) or "## Current version" in prefix[-40:]  # the parent's text differs first

    def test_the_closing_reminder_is_the_same_for_every_reflection(self):
        _, _, one = _prompt()
        _, _, other = _prompt(current_text="A different parent.", feedback=_feedback(1), tried=[])
        tail = one[one.index("## Task"):]
        assert other.endswith(tail) and "fenced code block" in tail and "a system prompt for a chat model" in tail

    def test_a_prompt_template_replaces_the_instructions_too(self):
        p = build_prompt(kind="k", objective="o", background="", component="text", components=["text"],
                         current_text="c", feedback=[], human_feedback=[], tried=[], template="{curr_param}\n{side_info}")
        assert "Study the feedback" not in p.messages[0]["content"]


class TestCompact:
    def test_short_values_share_their_line_long_ones_keep_a_block(self):
        fb = ExampleFeedback("t1", 0.0, {"text": "1918-19-18", "match": False},
                             {"verdict": "WRONG: accepted", "log": "line one\nline two", "note": " padded "})
        compact, full = render_feedback(fb, compact=True), render_feedback(fb)
        assert '**Input / expected:** {"text": "1918-19-18", "match": false}' in compact
        assert "**verdict:** WRONG: accepted" in compact
        assert "**log:**\n```\nline one\nline two\n```" in compact
        assert '**note:** " padded "' in compact  # blank edges stay visible
        assert len(compact) < len(full)
        for fact in ("1918-19-18", "WRONG: accepted", "line two", "score 0"):
            assert fact in compact and fact in full

    def test_an_example_drops_only_what_says_nothing(self):
        fb = ExampleFeedback("t2", 1.0, {"text": "2020-01-01", "why": "", "id": "t2", "note": None, "n": 0}, {})
        assert '**Input / expected:** {"text": "2020-01-01", "n": 0}' in render_feedback(fb, compact=True)
        other = ExampleFeedback("row-7", 1.0, {"id": "t2"}, {})
        assert '{"id": "t2"}' in render_feedback(other, compact=True)  # an id that is not the key stays

    def test_an_example_leaves_out_what_the_side_information_repeats(self):
        fb = ExampleFeedback("s3", 0.0, {"input": "Crème brûlée", "expected": "creme-brulee", "lang": "fr"},
                             {"input": "Crème brûlée", "expected": "creme-brulee", "got": "cr-me-br-l-e"})
        compact = render_feedback(fb, compact=True)
        assert '**Input / expected:** {"lang": "fr"}' in compact
        assert compact.count("creme-brulee") == 1 and "**got:** cr-me-br-l-e" in compact
        echoed = ExampleFeedback("s3", 0.0, {"input": "a"}, {"input": "a", "got": "b"})
        assert "Input / expected" not in render_feedback(echoed, compact=True)
        assert '"input": "a"' in render_feedback(echoed)  # the full rendering keeps both

    def test_a_compact_prompt_is_shorter_and_says_the_same(self):
        _, _, compact = _prompt(compact=True)
        _, _, full = _prompt()
        assert len(compact) < len(full)
        for fact in ('"question": "q-1"', "answer-0", "got-1", "Traceback: KeyError 'q'", "## Task"):
            assert fact in compact


class TestAnswerCap:
    def test_fitted_to_the_current_text_within_the_configured_cap(self):
        assert answer_token_cap("\\d+-\\d+-\\d+", 200) == MIN_ANSWER_TOKENS
        assert answer_token_cap("x" * 100, 2000) == 64 + 300
        assert answer_token_cap("x" * 5000, 2000) == 2000
        assert answer_token_cap("x", 64) == 64  # a smaller cap the user set is kept

    def test_only_the_local_model_gets_a_fitted_cap(self):
        for model, expected in ((LOCAL_MODEL, MIN_ANSWER_TOKENS), ("openai/gpt-4o-mini", 200)):
            ctx = SimpleNamespace(cfg=SimpleNamespace(reflection_lm=LMConfig(model=model, max_tokens=200)))
            assert reflection_lm(ctx, "a short regex").max_tokens == expected


class TestShortening:
    def test_cuts_side_info_never_the_candidate_and_says_so(self):
        long_candidate = "RULE " * 2000  # 10,000 characters: larger than the whole budget
        p, _, user = _prompt(current_text=long_candidate, feedback=_feedback(3, big=5000), max_chars=12_000)
        assert p.shortened
        assert long_candidate in user  # the candidate, whole
        assert "(Some feedback was shortened to fit the model's context window.)" in user
        assert "x" * 5000 not in user
        assert "LOG0:" not in user or "more characters cut" in user

    def test_moderate_overflow_clips_fields_but_keeps_every_example(self):
        p, _, user = _prompt(feedback=_feedback(3, big=6000), max_chars=8000)
        assert p.shortened
        assert len(user) <= 8000 + 600  # the side info was brought down to (about) the budget
        for i in range(3):
            assert f"### Example `ex{i}`" in user
        assert "more characters cut]" in user

    def test_human_feedback_and_tried_texts_survive_shortening(self):
        p, _, user = _prompt(feedback=_feedback(3, big=6000), max_chars=3000)
        assert p.shortened
        assert "- Never promise refunds." in user and "You are a bot." in user

    def test_render_feedback_clips_long_fields(self):
        fb = ExampleFeedback("k", 0.25, "plain input", {"log": "y" * 300})
        text = render_feedback(fb, limit=100)
        assert "y" * 100 in text and "y" * 101 not in text
        assert "[200 more characters cut]" in text
        assert "**Input / expected:**\n```\nplain input\n```" in text


class TestParseAnswer:
    def test_fenced(self):
        a = parse_answer("I added a greeting.\n```\nHello! " + CURRENT + "\n```\nDone.", CURRENT)
        assert (a.text, a.fenced, a.reason) == ("Hello! " + CURRENT, True, "")

    def test_fence_with_language_tag(self):
        assert parse_answer("```python\nx = 1\ny = 2\n```", "x = 0").text == "x = 1\ny = 2"

    def test_an_artifact_containing_fenced_blocks_survives_whole(self):
        # first opening fence to LAST closing fence (as GEPA): a prompt with a JSON example in a
        # code fence is not cut at the example's closing fence
        answer = "New prompt:\n```\nYou are a bot.\n```json\n{\"a\": 1}\n```\nAnswer in JSON.\n```\nDone."
        assert parse_answer(answer, CURRENT).text == 'You are a bot.\n```json\n{"a": 1}\n```\nAnswer in JSON.'

    def test_a_longer_fence_closes_only_with_the_same_length(self):
        answer = "````\nuse ```python blocks```\n```\nstill inside\n````\ntrailing talk"
        assert parse_answer(answer, CURRENT).text == "use ```python blocks```\n```\nstill inside"

    def test_a_change_line_written_inside_the_fence_is_not_part_of_the_new_version(self):
        answer = "```\nChange: name the labels.\n\nYou are a router. Answer with one label.\n```"
        assert parse_answer(answer, CURRENT).text == "You are a router. Answer with one label."
        # unless the current version starts with such a line itself (a changelog, say)
        log = "Change: v1\nfirst"
        assert parse_answer("```\nChange: v2\nsecond\n```", log).text == "Change: v2\nsecond"

    def test_a_fence_holding_only_the_change_line_is_no_new_version(self):
        # a 1.5B model's slip on the slugify example: its "module" was the Change line alone
        a = parse_answer("```\nChange: Added a check for an empty string input.\n\n```", CURRENT)
        assert a.text is None and a.fenced and a.reason == CHANGE_ONLY
        assert parse_answer("```\n\n```", CURRENT).reason == "the answer is empty"

    def test_unclosed_fence_takes_the_rest(self):
        # the answer was cut by the token cap in the middle of the block
        a = parse_answer("Here it is:\n```\nline one\nline two", CURRENT)
        assert a.text == "line one\nline two" and a.fenced

    def test_no_fence_with_require_fence_is_a_failure_with_a_reason(self):
        a = parse_answer("Just be nicer to people.", CURRENT, require_fence=True)
        assert a.text is None and not a.fenced
        assert a.reason == "the answer has no fenced code block"

    def test_no_fence_without_require_fence_takes_the_whole_answer(self):
        a = parse_answer("  Be nicer to people.\n", CURRENT, require_fence=False)
        assert (a.text, a.fenced, a.reason) == ("Be nicer to people.", False, "")

    @pytest.mark.parametrize("answer", ["", "   \n", "```\n\n```", "```\n   \n```", "```\n```", "```text\n```"],
                             ids=["empty", "blank", "empty-fence", "blank-fence", "adjacent-fences", "tagged-empty"])
    def test_empty(self, answer):
        a = parse_answer(answer, CURRENT, require_fence=False)
        assert a.text is None and a.reason == "the answer is empty"

    def test_none_answer_is_empty_not_a_crash(self):
        assert parse_answer(None, CURRENT, require_fence=False).reason == "the answer is empty"

    @pytest.mark.parametrize("answer", [f"```\n{CURRENT}\n```", f"```\n\n  {CURRENT}  \n\n```", f"  {CURRENT}  "])
    def test_unchanged(self, answer):
        a = parse_answer(answer, CURRENT, require_fence=False)
        assert a.text is None and a.reason == "the answer is unchanged from the current version"

    def test_nested_backticks_inside_a_longer_fence(self):
        inner = "Answer in Markdown. Example:\n```json\n{\"ok\": true}\n```\nThat is all."
        a = parse_answer(f"New version:\n````\n{inner}\n````\n", CURRENT)
        assert a.text == inner

    def test_inline_backticks_do_not_close_the_block(self):
        text = "Quote code with ``` inline ``` like this."
        assert parse_answer(f"```\n{text}\n```", CURRENT).text == text

    def test_a_longer_closing_run_is_not_a_shorter_fence(self):
        # a 4-backtick block is not closed by a line of three
        a = parse_answer("````\nA\n```\nB\n````", CURRENT)
        assert a.text == "A\n```\nB"


def test_seed_prompt_asks_for_the_kind_from_the_objective_under_gepas_headings():
    system, user = seed_prompt("a haiku", "Write about rain.", "Japanese style")
    assert "a haiku" in system["content"]
    assert "## Goal\n\nWrite about rain." in user["content"]
    assert "## Domain Context & Constraints\n\nJapanese style" in user["content"]
    assert "## Sample Inputs" not in user["content"]  # no dataset
    assert "one fenced code block" in user["content"] and "## Output Format" in user["content"]
    _, user = seed_prompt("", "Solve.", "", [{"input": f"q{i}"} for i in range(5)])
    assert "## Domain Context" not in user["content"] and "## Sample Inputs" in user["content"]
    assert '- Example 3: {"input": "q2"}' in user["content"] and "Example 4" not in user["content"]


def test_worst_regression_names_the_example_lost_most_on_and_what_went_wrong_there():
    from engine.evaluation import Scored
    from engine.search.proposal import worst_regression

    parent = {k: Scored(1.0, {}, None) for k in ("a", "b", "c")}
    child = {"a": Scored(0.5, {"verdict": "close"}, None),
             "b": Scored(0.0, {"input": "x", "error": "NameError: name 're' is not defined"}, None),
             "c": Scored(0.0, {}, "Traceback (most recent call last):\n  File 'x', line 3\nValueError: bad value\n")}
    # b and c lost as much; the first key wins, and an error-like field is all that is shown
    assert worst_regression(parent, child, ["a", "b", "c"]) == \
        "; worst: `b` 1 → 0: NameError: name 're' is not defined"
    # the evaluator's own error: its last line, spaces folded
    assert worst_regression(parent, child, ["a", "c"]) == "; worst: `c` 1 → 0: ValueError: bad value"
    # no error: the side information on one line, cut to a readable length
    long = {"a": Scored(0.0, {"verdict": "WRONG " * 60, "n": [1, 2]}, None)}
    note = worst_regression(parent, long, ["a"])
    assert note.startswith("; worst: `a` 1 → 0: verdict: WRONG WRONG") and note.endswith("…")
    assert len(note) < 240
    # whitespace that is the failure stays visible
    tabs = {"a": Scored(0.0, {"input": "Tabs\tand\nnewlines", "got": "tabs\tand\nnewlines"}, None)}
    assert worst_regression(parent, tabs, ["a"]) == \
        '; worst: `a` 1 → 0: input: "Tabs\\tand\\nnewlines"; got: "tabs\\tand\\nnewlines"'
    # nothing lost, nothing said
    assert worst_regression(parent, {k: Scored(1.0, {}, None) for k in parent}, ["a", "b"]) == ""


def test_already_tried_shows_each_texts_result_when_known():
    _, _, user = _prompt(tried=[("First try.", "no improvement on the minibatch (0 vs parent 2); worst: `q1` 1 → 0: "
                                               "too rude"), "Second try."])
    tried = user[user.index("## Already tried"):user.index("## Task")]
    assert "```\nFirst try.\n```\nResult: no improvement on the minibatch (0 vs parent 2); worst: `q1` 1 → 0: too rude" \
        in tried
    assert "```\nSecond try.\n```\n\n" in tried + "\n" and tried.count("Result:") == 1


def test_a_compact_prompt_shows_a_tried_module_by_its_changed_lines_and_a_short_text_whole():
    module = ("import re\nimport unicodedata\n\ndef slugify(title):\n"
              "    title = unicodedata.normalize('NFKD', title).encode('ascii', 'ignore').decode()\n"
              "    title = title.lower()\n    title = re.sub(r'[^a-z0-9]+', '-', title)\n    return title.strip('-')")
    tried = module.replace("import re\n", "").replace("title.lower()", "title.casefold()")
    _, _, user = _prompt(current_text=module, tried=[(tried, "no improvement; worst: `s0` 1 → 0: NameError"),
                                                     ("x", "")], compact=True)
    shown = user[user.index("## Already tried"):user.index("## Task")]
    assert ("Changed lines (- removed, + added):\n```diff\n-import re\n…\n-    title = title.lower()\n"
            "+    title = title.casefold()\n```\nResult: no improvement; worst: `s0` 1 → 0: NameError") in shown
    assert "```\nx\n```" in shown  # a whole text shorter than any diff of it
    _, _, full = _prompt(current_text=module, tried=[(tried, "")])
    assert "```\n" + tried + "\n```" in full and "Changed lines" not in full  # only small models get the diff


class TestSmallModelFences:
    """Answers of the local 1.5B model seen in a run of a date regex (bench/real_lm_dev)."""

    def test_a_change_line_in_a_fenced_block_of_its_own_is_not_part_of_the_new_version(self):
        answer = "```\nChange: Updated the regular expression.\n```\n```\n\\d{4}-\\d{2}-\\d{2}\n```"
        assert parse_answer(answer, r"\d+-\d+-\d+").text == r"\d{4}-\d{2}-\d{2}"

    def test_a_block_opened_with_four_backticks_and_closed_with_three_ends_at_its_close(self):
        answer = "Change: anchor it.\n\n````\n^(19|20)\\d{2}-\\d{2}-\\d{2}$\n```"
        assert parse_answer(answer, r"\d+-\d+-\d+").text == r"^(19|20)\d{2}-\d{2}-\d{2}$"

    def test_a_lone_change_block_is_still_no_new_version(self):
        a = parse_answer("```\nChange: nothing else follows.\n```\n", r"\d+")
        assert a.text is None and a.reason == CHANGE_ONLY


def test_each_reflection_on_the_local_model_samples_with_its_own_seed():
    """The slot k as the seed made every step's first proposal sample alike on the local model."""
    from engine.search.proposal import sample_index

    seeds = {sample_index("local/qwen2.5-coder-1.5b", 0, f"c{i}", a) for i in range(50) for a in (0, 1)}
    assert len(seeds) == 100  # every proposal and attempt its own
    assert sample_index("local/qwen2.5-coder-1.5b", 0, "c1") == sample_index("local/qwen2.5-coder-1.5b", 0, "c1")
    assert sample_index("openai/gpt-4.1-mini", 1, "c1", 1) == 1  # others keep the slot (a scripted LM reads it)
