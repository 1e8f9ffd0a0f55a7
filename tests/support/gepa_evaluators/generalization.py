"""Written for GEPA's optimize_anything, generalization (dataset + valset): a word list judged on
unseen words. Reads opt_state (the best evaluations of this example so far) as GEPA injects it."""

import gepa.optimize_anything as oa


def evaluate(candidate, example, opt_state: oa.OptimizationState):
    previous = opt_state.best_example_evals[0]["score"] if opt_state.best_example_evals else None
    ok = example["word"] in candidate.split()
    return (1.0 if ok else 0.0), {"expected": example["word"], "previous_best": previous}
