"""The offline default LM: Qwen2.5-Coder-1.5B on the CPU, served in-process by xllamacpp and
reached through litellm as ``local/qwen2.5-coder-1.5b`` (a ``CustomLLM`` provider).

Contract:
- the model file is prepared by ``engine.lm.local_model.ensure_model_file`` (join + verify) and
  loaded once per process, on first use, after a free-memory check; later calls reuse it;
- the runtime uses every core this process may run on; requests are served one at a time under
  a lock, so concurrent proposals queue instead of splitting the CPU (which would make every
  one of them slower and none of them earlier);
- an answer is written as a stream, so that a request its caller abandoned (``engine.lm.abandon``:
  a pause, a stop, the time limit) stops within a token, or leaves the queue, instead of being
  written to its end while every later call waits (the prompt, once being read, is read whole);
- every request carries ``LOOP_GUARD`` (DRY sampling), which breaks off an answer that repeats itself;
- tokens are counted by the runtime; cost is always $0;
- a request that does not fit the context window fails with litellm's
  ``ContextWindowExceededError`` naming both sizes. Shortening the prompt is the caller's
  policy: ``context_window()`` and ``count_tokens(messages)`` let it measure before calling.

The runtime also listens on a random 127.0.0.1 port (xllamacpp always starts its HTTP server);
we protect it with a random API key that never leaves this process, and use it only for the
``/apply-template`` and ``/tokenize`` endpoints, which do not wait for a generation to finish.
Do not ``fork()`` a process after the model is loaded (its threads do not survive a fork).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from typing import Optional

import litellm
from litellm.llms.custom_llm import CustomLLM, CustomLLMError
from litellm.types.utils import ModelResponse, Usage

from engine.lm import abandon as abandoning
from engine.lm.local_model import LocalModelError, QWEN_CODER_1_5B, available_memory_bytes, ensure_model_file
from storage import settings

MODEL_NAME = "qwen2.5-coder-1.5b"
DEFAULT_CONTEXT = 8192
DEFAULT_MAX_TOKENS = 2048  # when the caller gives no max_tokens
# KV cache of Qwen2.5-1.5B in f16: 28 layers x 2 (K and V) x 256 values x 2 bytes per token.
_KV_BYTES_PER_TOKEN = 28 * 2 * 256 * 2
_MEMORY_MARGIN = 512 * 1024 * 1024  # compute buffers and the rest of the engine
# A 1.5B model at a low temperature falls into loops ("0[1-9]-0[1-9]|0[1-9]-0[1-9]|…" until the
# token cap): in a run of the regex example, 7 of 15 answers did, each paying the whole cap, and a
# cut loop became the next parent. llama.cpp's DRY sampler lowers the odds of a token that would
# extend a sequence already repeated within the last 64 tokens (the prompt's closing lines, then
# the answer itself: not the current version further up, so copying it costs nothing). A new line
# resets it, so lines that start alike are not affected (docs/benchmarks-local-lm.md).
LOOP_GUARD = {"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 64}


def configured_context() -> int:
    """Context window in tokens: ``REFRACT_LOCAL_CTX`` or 8192 (room for a ~6k-token prompt
    and a 2k-token answer; the model itself supports 32k at ~1 GB of extra memory)."""
    ctx = settings.value("REFRACT_LOCAL_CTX")  # at least 512, or a SettingError naming the variable
    return DEFAULT_CONTEXT if ctx is None else ctx


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class LocalRuntime:
    """One loaded model. Use ``get_runtime()``; do not build one per call."""

    def __init__(self, n_ctx: int) -> None:
        path = ensure_model_file()
        needed = QWEN_CODER_1_5B.size + n_ctx * _KV_BYTES_PER_TOKEN + _MEMORY_MARGIN
        available = available_memory_bytes()
        if available is not None and available < needed:
            raise LocalModelError(
                f"not enough free memory to load the local model: about {needed / 1e9:.1f} GB needed "
                f"(weights + a {n_ctx}-token context), {available / 1e9:.1f} GB available. Close other "
                f"programs, lower REFRACT_LOCAL_CTX, or configure a hosted model instead."
            )
        # How the model's threads wait for each other (an OpenMP barrier at every node of the
        # graph): spin 2000 times, then sleep. Measured interleaved (bench/local_lm_settings.py,
        # docs/benchmarks-local-lm.md): on an idle machine that generates 1.65x faster than
        # sleeping at once (OMP_WAIT_POLICY=PASSIVE, this provider's earlier setting); with one
        # busy process beside the model it keeps 0.8x of PASSIVE, where OpenMP's default spin
        # falls to about 0.2x and a 20000 spin to 0.33x. In a 1x1 run the evaluator workers sleep
        # while the model reflects. OpenMP reads this once, when the library loads; a wait
        # policy set by the user is kept.
        if "OMP_WAIT_POLICY" not in os.environ:
            os.environ.setdefault("GOMP_SPINCOUNT", "2000")
        import xllamacpp  # imported here: importing engine.lm.client must stay cheap

        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = n_ctx
        params.n_parallel = 1  # one slot: the whole context for one request at a time
        params.cpuparams.n_threads = _cpu_count()
        params.cpuparams_batch.n_threads = _cpu_count()
        params.cpuparams.poll = params.cpuparams_batch.poll = 0  # no effect with OpenMP (see above); no spin of its own
        params.verbosity = 0
        self._http_key = secrets.token_urlsafe(24)
        params.api_keys = [self._http_key]
        started = time.monotonic()
        try:
            self._server = xllamacpp.Server(params)
        except Exception as exc:  # noqa: BLE001 -- any loader failure becomes one clear message
            raise LocalModelError(f"the local model could not be loaded from {path}: {exc}") from exc
        self.load_seconds = time.monotonic() - started
        self.n_ctx = n_ctx
        self._base = self._server.listening_address
        self._lock = threading.Lock()

    def chat(self, request: dict, abandon: Optional[threading.Event] = None) -> dict:
        """One chat completion (OpenAI-shaped request and answer); queues behind other calls.
        ``LOOP_GUARD`` is added to every request (a request's own DRY settings win), so the
        engine and the benchmarks that call the runtime directly sample alike. Raises
        ``Abandoned`` once ``abandon`` is set, queued or writing."""
        while not self._lock.acquire(timeout=QUEUE_POLL_SECONDS):
            if abandon is not None and abandon.is_set():
                raise Abandoned("abandoned by its caller while queued")
        try:
            return _streamed(self._server, {**LOOP_GUARD, **request, "stream": True,
                                            "stream_options": {"include_usage": True}}, abandon)
        finally:
            self._lock.release()

    def count_tokens(self, messages: list[dict]) -> int:
        """Exact prompt length of ``messages`` after the chat template, in tokens."""
        prompt = self._post("/apply-template", {"messages": messages})["prompt"]
        return len(self._post("/tokenize", {"content": prompt, "add_special": True})["tokens"])

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(
            self._base + path, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._http_key}"},
        )
        with urllib.request.urlopen(req, timeout=60) as response:
            return json.loads(response.read())


class Abandoned(Exception):
    """A request stopped because its caller abandoned it (its answer would be dropped)."""


# How often a queued request looks whether its caller gave up on it
QUEUE_POLL_SECONDS = 0.1


def _streamed(server, request: dict, abandon: Optional[threading.Event]) -> dict:
    """The runtime's answer to a streamed ``request``, put together as the one a request without
    a stream gets (content, finish reason, usage, timings, or the runtime's error). The runtime
    calls ``on_chunk`` at every token and stops writing when it returns True."""
    parts: list[str] = []
    answer: dict = {"choices": [{"index": 0, "finish_reason": None, "message": {"role": "assistant"}}]}

    def on_chunk(chunk: dict) -> bool:
        if "error" in chunk:
            answer["error"] = chunk["error"]
            return True
        for choice in chunk.get("choices") or ():
            parts.append((choice.get("delta") or {}).get("content") or "")
            if choice.get("finish_reason"):
                answer["choices"][0]["finish_reason"] = choice["finish_reason"]
        for key in ("usage", "timings"):
            if key in chunk:
                answer[key] = chunk[key]
        return _closing.is_set() or (abandon is not None and abandon.is_set())

    server.handle_chat_completions(request, on_chunk)
    if "error" in answer:
        return {"error": answer["error"]}
    if (_closing.is_set() or (abandon is not None and abandon.is_set())) and "usage" not in answer:
        raise Abandoned("abandoned by its caller while its answer was written")
    answer["choices"][0]["message"]["content"] = "".join(parts)
    return answer


_runtime: LocalRuntime | None = None
_runtime_lock = threading.Lock()
# Set when the process exits: an answer being written stops at its next token.
_closing = threading.Event()
# How long the exit waits for that (a prompt being read is not cut; its first token stops it)
CLOSING_WAIT_SECONDS = 5.0


def get_runtime() -> LocalRuntime:
    """The process's runtime, loaded on first use (raises ``LocalModelError`` with the fix)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = LocalRuntime(configured_context())
            atexit.register(_stop_writing, _runtime)
        return _runtime


def _stop_writing(runtime: LocalRuntime) -> None:
    """At exit, end the answer being written before the interpreter shuts down. The runtime
    calls back into Python at every token, from a thread the shutdown may already have ended
    (requests are sent from daemon threads): a process that exited while an answer was being
    written aborted ("FATAL: exception not rethrown") instead of exiting with its own code."""
    _closing.set()
    if runtime._lock.acquire(timeout=CLOSING_WAIT_SECONDS):
        runtime._lock.release()


def generating() -> bool:
    """True while the runtime works on an answer: after a deadline or a pause cut a reflection,
    nobody waits for it, but the runtime finishes reading its prompt (an abandoned answer stops
    at the first token)."""
    return _runtime is not None and _runtime._lock.locked()


def context_window() -> int:
    """Tokens the local model can take (prompt + answer); known without loading the model."""
    return _runtime.n_ctx if _runtime is not None else configured_context()


def count_tokens(messages: list[dict]) -> int:
    """Prompt tokens of ``messages`` as the local model counts them (loads it if needed)."""
    return get_runtime().count_tokens(messages)


class LocalLLM(CustomLLM):
    """litellm handler for ``local/<name>``; only ``qwen2.5-coder-1.5b`` exists."""

    def completion(self, model, messages, api_base, custom_prompt_dict, model_response: ModelResponse,
                   print_verbose, encoding, api_key, logging_obj, optional_params: dict, *args, **kwargs):
        if model != MODEL_NAME:
            raise CustomLLMError(status_code=404, message=(
                f"unknown local model {model!r}: the only local model is local/{MODEL_NAME}"))
        try:
            runtime = get_runtime()
        except LocalModelError as exc:
            raise CustomLLMError(status_code=400, message=str(exc)) from exc
        # Without a cap llama.cpp generates until the context is full: minutes on a CPU.
        request = {"messages": messages, "max_tokens": min(DEFAULT_MAX_TOKENS, runtime.n_ctx)}
        for key in ("temperature", "max_tokens", "stop", "seed", "top_p"):
            if optional_params.get(key) is not None:
                request[key] = optional_params[key]
        answer = runtime.chat(request, abandon=abandoning.current())
        error = answer.get("error")
        if error:
            _raise_runtime_error(error, runtime.n_ctx)
        choice = answer["choices"][0]
        usage = answer.get("usage", {})
        model_response.choices[0].message.content = choice["message"].get("content") or ""
        model_response.choices[0].finish_reason = choice.get("finish_reason") or "stop"
        model_response.usage = Usage(prompt_tokens=usage.get("prompt_tokens", 0),
                                     completion_tokens=usage.get("completion_tokens", 0),
                                     total_tokens=usage.get("total_tokens", 0))
        model_response.model = f"local/{MODEL_NAME}"
        model_response._hidden_params["response_cost"] = 0.0
        model_response._hidden_params["timings"] = answer.get("timings", {})
        return model_response


def _raise_runtime_error(error: dict, n_ctx: int) -> None:
    if error.get("type") == "exceed_context_size_error":
        raise litellm.ContextWindowExceededError(
            message=(f"the prompt is {error.get('n_prompt_tokens', '?')} tokens but the local model's "
                     f"context window is {error.get('n_ctx', n_ctx)} tokens: shorten the side information "
                     f"(or raise REFRACT_LOCAL_CTX)"),
            model=f"local/{MODEL_NAME}", llm_provider="local")
    raise CustomLLMError(status_code=int(error.get("code") or 500),
                         message=str(error.get("message") or error))
