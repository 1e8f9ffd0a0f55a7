"""Does the candidate Python code define a correct ``slugify(title)``?

Each example is {"input": ..., "expected": ...}. The candidate is executed (inside Refract's
sandbox, never in the engine) and its ``slugify`` called on the input; the side information
shows the expected and actual output, which is what the reflection LM reads.
"""


def _load(candidate):
    namespace = {}
    exec(compile(candidate, "candidate.py", "exec"), namespace)
    fn = namespace.get("slugify")
    if not callable(fn):
        raise ValueError("the code must define a function slugify(title)")
    return fn


def validate(candidate):
    """Cheap check before any metric call: the code compiles and defines slugify."""
    try:
        compile(candidate, "candidate.py", "exec")
    except SyntaxError as exc:
        return f"the code does not compile: line {exc.lineno}: {exc.msg}"
    if "def slugify" not in candidate:
        return "the code must define a function named slugify(title)"
    return None


def evaluate(candidate, example):
    fn = _load(candidate)
    try:
        got = fn(example["input"])
    except Exception as exc:  # the candidate's own bug: show it to the reflection LM
        return 0.0, {"input": example["input"], "expected": example["expected"], "error": f"{type(exc).__name__}: {exc}"}
    ok = got == example["expected"]
    return (1.0 if ok else 0.0), {"input": example["input"], "expected": example["expected"], "got": got}
