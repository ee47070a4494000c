"""A scripted LLM server on 127.0.0.1 for tests: OpenAI Chat Completions and Anthropic Messages.

The real SDKs talk to it over HTTP. Each request takes the next scripted step: a reply text with
its usage, or a failure (a status code with headers, a malformed body, a delay past the client's
timeout). Requests are recorded so tests can check what the client sent.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Step:
    text: str = ""
    status: int = 200
    usage: dict = field(default_factory=dict)  # input, cache_read, cache_write, output, reasoning
    headers: dict = field(default_factory=dict)
    raw: bytes | None = None  # a body sent as is (malformed replies)
    delay_s: float = 0.0


class ScriptedServer:
    def __init__(self):
        self.steps: list[Step] = []
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server protocol
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                    step = server.steps.pop(0) if server.steps else Step(status=500, text="script exhausted")
                time.sleep(step.delay_s)
                payload = step.raw if step.raw is not None else json.dumps(_payload(self.path, step)).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.send_header("x-request-id", f"req-{len(server.requests)}")
                    self.send_header("request-id", f"req-{len(server.requests)}")
                    for name, value in step.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _payload(path: str, step: Step) -> dict:
    u = step.usage
    if step.status != 200:
        kind = {401: "authentication_error", 429: "rate_limit_error", 400: "invalid_request_error"}.get(
            step.status, "api_error")
        if path.endswith("/messages"):
            return {"type": "error", "error": {"type": kind, "message": step.text or kind}}
        return {"error": {"message": step.text or kind, "type": kind, "code": None}}
    if path.endswith("/messages"):
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "scripted",
                "content": [{"type": "text", "text": step.text}], "stop_reason": "end_turn",
                "usage": {"input_tokens": u.get("input", 0), "output_tokens": u.get("output", 0),
                          "cache_read_input_tokens": u.get("cache_read", 0),
                          "cache_creation_input_tokens": u.get("cache_write", 0)}}
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": step.text}}],
            "usage": {"prompt_tokens": u.get("input", 0) + u.get("cache_read", 0),
                      "completion_tokens": u.get("output", 0),
                      "total_tokens": u.get("input", 0) + u.get("cache_read", 0) + u.get("output", 0),
                      "prompt_tokens_details": {"cached_tokens": u.get("cache_read", 0)},
                      "completion_tokens_details": {"reasoning_tokens": u.get("reasoning", 0)}}}
