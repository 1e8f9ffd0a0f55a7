"""Written for GEPA's optimize_anything, single-task search (no dataset): a product tagline.
Uses oa.log for diagnostics and side_info["scores"] for two objectives."""

import gepa.optimize_anything as oa


def evaluate(candidate):
    words = candidate.split()
    problems = []
    if len(words) > 8:
        problems.append(f"{len(words)} words; use at most 8")
    if "prompt" not in candidate.lower():
        problems.append("does not mention 'prompt'")
    if not candidate.rstrip().endswith("."):
        problems.append("does not end with a period")
    oa.log("problems:", "; ".join(problems) or "none")
    score = 1 - len(problems) / 3
    return score, {"problems": problems,
                   "scores": {"brevity": min(1.0, 8 / max(len(words), 1)), "rules": score}}
