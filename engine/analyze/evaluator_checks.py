"""Findings about the evaluator and the data: an evaluator that tells candidates apart nowhere,
examples every candidate passes or fails, side information that never changes, gains that do
not hold on validation (noise), a validation set too small to choose with, and overfitting."""

from __future__ import annotations

from collections import defaultdict

from engine.analyze.finding import INFO, SEVERE, WARNING, Finding, plural, share
from engine.analyze.records import RunRecords

TOL = 1e-9
MIN_CANDIDATES = 3  # an example scored for fewer candidates than this says nothing about the evaluator
SMALL_VALSET = 5  # fewer validation examples than this: the frontier and the best are chosen on too little


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def evaluator_signal(recs: RunRecords) -> list[Finding]:
    """Examples on which every candidate got the same score: all of them (an evaluator that
    cannot tell candidates apart), or some (validation examples every candidate passes or fails)."""
    judged = {k: agg for k, agg in recs.per_example.items() if agg[0] >= MIN_CANDIDATES}
    if len(judged) < 2 and not (recs.single_task and judged):
        return []
    flat = sorted(k for k, (_, lo, hi) in judged.items() if hi - lo <= TOL)
    n_cands = max(n for n, _, _ in judged.values())
    if len(flat) == len(judged):
        values = sorted({round(judged[k][1], 6) for k in flat})
        return [Finding(
            "uninformative_evaluator", SEVERE,
            f"The evaluator gave every candidate the same score on every example ({plural(len(flat), 'example')}, "
            f"up to {n_cands} candidates each; scores seen: {', '.join(map(str, values[:5]))})",
            "No candidate can improve on its parent, so every proposal is rejected and the search cannot move. Check "
            "that evaluate() reads the candidate it is given and that its score depends on it (try the evaluator on "
            "the seed and on a deliberately wrong text).",
            {"examples": flat[:30], "counts": {"examples": len(flat), "candidates": n_cands}}, weight=len(flat))]
    top = recs.max_score()
    val = [k for k in recs.val_keys if k in judged]
    passed = [k for k in val if judged[k][1] >= top - TOL]
    failed = [k for k in val if k in flat and k not in passed]
    if not val or len(passed) + len(failed) < max(2, 0.25 * len(val)):
        return []
    many = len(passed) + len(failed) >= 0.5 * len(val)
    parts = [f"every candidate passes {plural(len(passed), 'validation example')}" if passed else "",
             f"every candidate gets the same score on {plural(len(failed), 'other')}" if failed else ""]
    return [Finding(
        "saturated_examples", WARNING if many else INFO,
        f"Of {len(val)} validation examples, " + " and ".join(p for p in parts if p) + f" (up to {n_cands} candidates)",
        "Those examples cannot separate candidates: the frontier and the best are chosen on the others. Harder (or "
        "fixable) examples in the validation set give the search more to choose with.",
        {"examples": (passed + failed)[:30], "counts": {"passed_by_all": len(passed), "same_for_all": len(failed),
                                                        "validation": len(val)}},
        weight=len(passed) + len(failed))]


def constant_side_info(recs: RunRecords) -> list[Finding]:
    """Side information identical for every sampled candidate on each example: the reflection
    LM reads the same feedback whatever the text, so it cannot learn why a version fails."""
    texts: dict[int, set[str]] = defaultdict(set)
    seen: dict[int, set[str]] = defaultdict(set)
    for cid, pk, info in recs.side_info:
        texts[pk].add(info)
        seen[pk].add(cid)
    judged = [pk for pk in texts if len(seen[pk]) >= MIN_CANDIDATES]
    constant = [pk for pk in judged if len(texts[pk]) == 1]
    if len(judged) < 2 or len(constant) < 0.8 * len(judged):
        return []
    empty = all(texts[pk] == {"{}"} for pk in constant)
    keys = [recs.examples.get(pk, ("?", ""))[0] for pk in constant]
    return [Finding(
        "constant_side_info", WARNING,
        f"Side information never changes: on {share(len(constant), len(judged))} examples every sampled candidate got "
        + ("none at all" if empty else "the same side information"),
        "The reflection LM reads the side information to learn why a version fails; when it is the same for every "
        "text, only the score tells versions apart. Return what went wrong from evaluate(): the output, what was "
        "expected, the error.",
        {"examples": keys[:30], "counts": {"examples": len(constant), "sampled_candidates": len({c for c, _, _ in recs.side_info})}},
        weight=len(constant))]


def noisy_gains(recs: RunRecords) -> list[Finding]:
    """Children that beat their parent on the minibatch, were validated, and scored below it on
    validation: a noisy evaluator, or a minibatch too small to tell."""
    n_val, pairs = len(recs.val_keys), []
    for c in recs.candidates:
        parent = recs.by_id.get((c["parent_ids"] or [None])[0]) if len(c["parent_ids"] or []) == 1 else None
        if c["origin"] != "reflection" or c["status"] != "accepted" or parent is None or \
                (c["val_count"] or 0) < n_val or (parent["val_count"] or 0) < n_val or parent["val_mean"] is None:
            continue
        pairs.append((c["id"], c["val_mean"] - parent["val_mean"]))
    lower = [cid for cid, d in pairs if d < -TOL]
    if len(pairs) < 5 or len(lower) < 0.4 * len(pairs):
        return []
    return [Finding(
        "noisy_evaluator", SEVERE if len(pairs) >= 8 else WARNING,
        f"Minibatch gains do not hold: {share(len(lower), len(pairs))} validated children scored below their parent "
        "on validation after beating it on the minibatch",
        "A child that improves on its minibatch should rarely be worse on validation. When half of them are, the "
        "evaluator is noisy (the same text scores differently) or the minibatch is too small to judge: make the "
        f"evaluator deterministic (fix its seeds, temperature 0 for a task LM), or raise minibatch_size (now "
        f"{recs.search['minibatch_size']}).",
        {"candidates": lower[:20], "counts": {"validated_children": len(pairs), "below_parent": len(lower)}},
        weight=len(lower) / len(pairs))]


def small_valset(recs: RunRecords) -> list[Finding]:
    """A validation set so small that the best and the frontier are chosen on a handful of
    examples (the held-out test then tells another story)."""
    n = len(recs.val_keys)
    if recs.single_task or n >= SMALL_VALSET or not recs.candidates:
        return []
    best = recs.run.get("best_val_mean")
    ties = sum(1 for c in recs.candidates if c["status"] == "accepted" and not c["vetoed"] and best is not None
               and (c["val_count"] or 0) >= n and c["val_mean"] is not None and abs(c["val_mean"] - best) <= TOL)
    train = recs.n_train
    return [Finding(
        "small_valset", SEVERE if n <= 3 else WARNING,
        f"The validation set has {plural(n, 'example')}: the validation mean moves in steps of {1 / n:.2f}"
        + (f", and {ties} candidates tie for the best" if ties > 1 else ""),
        f"Parents, the frontier and the final best are chosen on these {n} only, so a lucky candidate wins and the "
        f"held-out test may disagree. Move examples from the training set ({train}) into the validation set, or "
        "add new ones.",
        {"examples": recs.val_keys, "counts": {"validation": n, "training": train, "tied_for_best": ties}},
        weight=SMALL_VALSET - n)]


def overfitting(recs: RunRecords) -> list[Finding]:
    """The best's validation score well above its held-out test score, or the training–validation
    gap of the validated candidates growing as the search goes on."""
    out = []
    run = recs.run
    best, test = run.get("best_val_mean"), run.get("test_mean")
    if best is not None and test is not None and best - test >= 0.15:
        seed_test = run.get("seed_test_mean")
        out.append(Finding(
            # a gap measured on a handful of test examples is one or two examples: worth a look, not an alarm
            "overfitting", SEVERE if best - test >= 0.3 and len(recs.test_keys) >= SMALL_VALSET else WARNING,
            f"Validation–test gap of {best - test:.2f}: the best scores {best:.3f} on validation and {test:.3f} on the "
            f"held-out test ({plural(len(recs.test_keys), 'example')})"
            + (f"; the seed {seed_test:.3f}" if seed_test is not None else ""),
            "The search chose a candidate that fits the validation examples better than new ones. A larger or more "
            "varied validation set, or a simpler artifact, generalises better.",
            {"candidates": [run.get("best_candidate_id")], "examples": recs.test_keys[:30],
             "counts": {"validation": len(recs.val_keys), "test": len(recs.test_keys)}}, weight=best - test))
    if recs.val_split == "val":
        gaps = [(c["step"], recs.train_means[c["id"]][0] - c["val_mean"]) for c in recs.candidates
                if c["status"] == "accepted" and c["val_mean"] is not None and (c["val_count"] or 0) >= len(recs.val_keys)
                and recs.train_means.get(c["id"], (0, 0))[1] >= 2]
        gaps.sort()
        if len(gaps) >= 6:
            third = len(gaps) // 3
            early, late = _mean(g for _, g in gaps[:third]), _mean(g for _, g in gaps[-third:])
            if late - early >= 0.15 and late >= 0.15:
                out.append(Finding(
                    "overfitting", WARNING,
                    f"The training–validation gap grows: {early:+.2f} for the first validated candidates, {late:+.2f} "
                    "for the last ones",
                    "Later candidates do better on the training examples the reflection reads than on validation: "
                    "the texts learn the training examples. More varied training examples help.",
                    {"counts": {"candidates": len(gaps)}}, weight=late - early))
    return out
