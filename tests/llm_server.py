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
    when: str = ""  # answer only a request whose body contains this text (concurrent calls)


def request_text(body: dict) -> str:
    """All text a request carried (system and messages, either protocol), joined."""
    parts = []
    for item in [*(body.get("system") or []), *body.get("messages", [])]:
        content = item.get("content", item.get("text", ""))
        parts += [content] if isinstance(content, str) else [block.get("text", "") for block in content]
    return "\n".join(parts)


class ScriptedServer:
    def __init__(self, responder=None):
        self.steps: list[Step] = []
        self.responder = responder  # body -> Step, for requests no scripted step answers
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self.active = self.most_active = 0  # requests being answered now, and the most at once
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server protocol
                raw = self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}"
                body = json.loads(raw)
                record = {"path": self.path, "body": body, "headers": dict(self.headers), "t0": time.monotonic()}
                with server._lock:
                    server.requests.append(record)
                    step = server._next(json.dumps(body))
                    server.active += 1
                    server.most_active = max(server.most_active, server.active)
                try:
                    time.sleep(step.delay_s)
                    self._answer(step)
                finally:
                    record["t1"] = time.monotonic()  # [t0, t1]: when this request was in flight here
                    with server._lock:
                        server.active -= 1

            def _answer(self, step):
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
        # close() waits for the serving loop to see the request: at the default poll of 0.5 s, half a second a server
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def _next(self, body: str) -> Step:
        for i, step in enumerate(self.steps):
            if not step.when or step.when in body:
                return self.steps.pop(i)
        if self.responder is not None:
            return self.responder(json.loads(body))
        return Step(status=500, text="script exhausted")

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
    prompt = u.get("input", 0) + u.get("cache_read", 0) + u.get("cache_write", 0)
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": step.text}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": u.get("output", 0),
                      "total_tokens": prompt + u.get("output", 0),
                      "prompt_tokens_details": {"cached_tokens": u.get("cache_read", 0),
                                                "cache_write_tokens": u.get("cache_write", 0)},
                      "completion_tokens_details": {"reasoning_tokens": u.get("reasoning", 0)}}}


def kernel_replies(translations, improvements, repaired: str, usage: dict, delay_s: float = 0.0):
    """A responder for the search loop: the operator a request's job names picks the kernel (sources
    drawn from the `translations` and `improvements` iterators; repairs get `repaired`); reflect
    replies start with an analysis."""
    def respond(body: dict) -> Step:
        job = request_text(body).rsplit("# Your job", 1)[-1]
        if "Write `ModelNew` for this task" in job:
            kernel = next(translations)
        elif "This kernel failed the judge" in job:
            kernel = repaired
        else:
            kernel = next(improvements)
        analysis = "## Analysis\nThe fastest reads each row once with all threads.\n\n## Kernel\n" \
            if "measured kernels" in job else ""
        return Step(text=f"{analysis}Here is the kernel.\n\n```python\n{kernel}```\n", usage=usage, delay_s=delay_s)
    return respond
