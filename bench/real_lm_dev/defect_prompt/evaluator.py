import os
import litellm
TASK_MODEL = os.environ.get("REAL_LM_TASK_MODEL", "local/qwen2.5-coder-1.5b")

def evaluate(candidate, example):
    if "{review}" not in candidate:
        return 0.0, {"review": example["review"], "error": "the prompt has no {review} placeholder"}
    prompt = candidate.replace("{review}", example["review"])
    r = litellm.completion(model=TASK_MODEL, messages=[{"role": "user", "content": prompt}], temperature=0.0, max_tokens=8)
    out = (r.choices[0].message.content or "").strip()
    norm = out.lower().rstrip(".").strip()
    if norm == example["label"]:
        return 1.0, {"review": example["review"], "output": out, "result": "correct"}
    return 0.0, {"review": example["review"], "expected": example["label"], "output": out}
