"""A small OpenAI-compatible chat server that misbehaves on purpose (the fault-injection suite).

``FaultServer(rate=0.3).start()`` serves ``POST /v1/chat/completions`` on 127.0.0.1 from a
thread. Each request, with probability ``rate``, gets one of the faults in ``FAULTS`` (chosen
in turn by a seeded generator): a 429, a 500, a hang past the client's timeout, a body that is
not JSON, or a well-formed answer without a fenced block. The other requests are answered by
the toy task's script (``tests.support.toy.script``), with a usage block so litellm prices the
call like the model it names (e.g. ``openai/gpt-4.1-mini`` with ``api_base`` pointing here).
``counts`` says how many of each fault (and ``ok``) were served; safe to read at any time;
``authorizations`` holds the ``Authorization`` header of every request, in order (what a key
reached the server as).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support import toy

FAULTS = ("rate_limit", "server_error", "timeout", "bad_body", "no_fence")


class FaultServer:
    def __init__(self, rate: float = 0.3, seed: int = 0, hang_seconds: float = 3.0, latency: float = 0.05,
                 base_temperature: float = 0.7) -> None:
        self.rate, self.hang_seconds, self.latency = rate, hang_seconds, latency
        self.base_temperature = base_temperature
        self.counts: Counter = Counter()
        self.authorizations: list = []
        self._rng = random.Random(seed)
        self._turn = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="fault-server")

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def start(self) -> "FaultServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def snapshot(self) -> Counter:
        with self._lock:
            return Counter(self.counts)

    def next_fault(self) -> str:
        with self._lock:
            if self._rng.random() >= self.rate:
                self.counts["ok"] += 1
                return "ok"
            fault = FAULTS[self._turn % len(FAULTS)]
            self._turn += 1
            self.counts[fault] += 1
            return fault

    def answer(self, body: dict) -> str:
        """The toy's reflection answer; the proposal's sample index is read back from its
        temperature (the engine raises it by 0.15 per sibling)."""
        k = max(0, round((float(body.get("temperature") or self.base_temperature) - self.base_temperature) / 0.15))
        return toy.script(body["messages"], {"sample_index": k})


def _completion(model: str, messages: list, text: str) -> bytes:
    prompt = sum(len(str(m.get("content", "")).split()) for m in messages)
    usage = {"prompt_tokens": prompt, "completion_tokens": len(text.split()), "total_tokens": prompt + len(text.split())}
    return json.dumps({"id": "chatcmpl-fault", "object": "chat.completion", "created": int(time.time()), "model": model,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}], "usage": usage}).encode()


def _handler(server: FaultServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: the counts are the record
            pass

        def _send(self, status: int, data: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout) or its process was killed
                pass

        def do_POST(self) -> None:
            server.authorizations.append(self.headers.get("authorization"))
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            fault = server.next_fault()
            time.sleep(server.latency)
            if fault == "rate_limit":
                return self._send(429, b'{"error": {"message": "rate limited (injected)", "type": "rate_limit"}}')
            if fault == "server_error":
                return self._send(500, b'{"error": {"message": "internal error (injected)"}}')
            if fault == "timeout":
                time.sleep(server.hang_seconds)
            if fault == "bad_body":
                return self._send(200, b"<html>upstream proxy error (injected)</html>")
            text = "I think the list is fine as it is." if fault == "no_fence" else server.answer(body)
            self._send(200, _completion(body.get("model", ""), body["messages"], text))

    return Handler
