"""Fill the prompt template with the message, ask the task model, compare its answer with the
expected price exactly."""

import os

import litellm

TASK_MODEL = os.environ.get("REAL_LM_TASK_MODEL", "local/qwen2.5-coder-1.5b")


def evaluate(candidate, example):
    if "{message}" not in candidate:
        return 0.0, {"message": example["message"], "error": "the prompt has no {message} placeholder, so the model never sees the message"}
    prompt = candidate.replace("{message}", example["message"])
    response = litellm.completion(model=TASK_MODEL, messages=[{"role": "user", "content": prompt}],
                                  temperature=0.0, max_tokens=24)
    output = (response.choices[0].message.content or "").strip()
    if output == example["price"]:
        return 1.0, {"message": example["message"], "output": output, "result": "correct"}
    return 0.0, {"message": example["message"], "expected": example["price"], "output": output}
