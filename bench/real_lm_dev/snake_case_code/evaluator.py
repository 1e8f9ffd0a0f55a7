"""Run to_snake(name) from the candidate source in a fresh Python process and compare its
answer with the expected string."""

import json
import subprocess
import sys

RUNNER = """
import json, sys
source, n = json.loads(sys.stdin.read())
namespace = {}
exec(source, namespace)
print(json.dumps(namespace["to_snake"](n)))
"""


def evaluate(candidate, example):
    n, expected = example["text"], example["expected"]
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", RUNNER], input=json.dumps([candidate, n]),
                              capture_output=True, text=True, timeout=5)
    except subprocess.TimeoutExpired:
        return 0.0, {"call": f"to_snake({n!r})", "expected": expected, "error": "timed out after 5 s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return 0.0, {"call": f"to_snake({n!r})", "expected": expected, "error": last}
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if got == expected:
        return 1.0, {"call": f"to_snake({n!r})", "result": "correct"}
    return 0.0, {"call": f"to_snake({n!r})", "expected": expected, "got": got}
