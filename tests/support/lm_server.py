"""A tiny OpenAI-compatible server for LM checks, and a port nobody listens on."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server:
    """Answers "ready" for the model ``good`` and 404 (model not found, as OpenAI says it) for
    any other; counts the requests."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                outer.requests.append(body["model"])
                if body["model"] == "good":
                    data = {"id": "x", "object": "chat.completion", "created": 0, "model": "good",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ready"},
                                         "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
                    status = 200
                else:
                    data = {"error": {"message": f"The model `{body['model']}` does not exist", "type": "invalid_request_error",
                                      "code": "model_not_found"}}
                    status = 404
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.api_base = f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
