"""A chat completions endpoint on 127.0.0.1 for the model binding's tests (no network): POST
/v1/chat/completions answered from a script of scenarios, one per request, each request kept
for the test to inspect. It speaks both the whole JSON answer and `stream: true` server-sent
events, and can answer slowly, with an error status, or drop the connection mid-answer."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    content: str | None = None
    refusal: str | None = None
    status: int = 200
    error: str = "bad request"
    delay: float = 0.0  # seconds before the first byte of the answer
    drop: bool = False  # close the connection halfway through the body
    finish_reason: str = "stop"
    raw: str | None = None  # a 200 whose body is this text (an endpoint that is not one), as text/html


class ModelServer:
    def __init__(self) -> None:
        self.script: list[Answer] = []
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body,
                                        "authorization": self.headers.get("Authorization")})
                answer = server.script.pop(0) if server.script else Answer(status=500, error="nothing scripted")
                time.sleep(answer.delay)
                if self.path != "/v1/chat/completions":
                    answer = Answer(status=404, error=f"no route {self.path}")
                if answer.raw is not None:
                    self._send(200, answer.raw, content_type="text/html")
                elif answer.status != 200:
                    self._send(answer.status, json.dumps({"error": {"message": answer.error, "type": "invalid"}}))
                elif body.get("stream"):
                    self._stream(body, answer)
                else:
                    self._send(200, json.dumps(_completion(body, answer)), drop=answer.drop)

            def _send(self, status: int, text: str, drop: bool = False, content_type: str = "application/json") -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if drop:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(data)

            def _stream(self, body: dict, answer: Answer) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                text = answer.content or ""
                pieces = [text[i:i + 5] for i in range(0, len(text), 5)] or [""]
                deltas = [{"role": "assistant", "content": ""}]
                deltas += [{"content": p} for p in pieces]
                if answer.refusal:
                    deltas.append({"refusal": answer.refusal})
                for number, delta in enumerate(deltas):
                    if answer.drop and number == len(deltas) // 2 + 1:
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                             "model": body["model"], "choices": [{"index": 0, "delta": delta,
                                                                  "finish_reason": None}]}
                    self._chunk(f"data: {json.dumps(chunk)}\n\n")
                end = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                       "choices": [{"index": 0, "delta": {}, "finish_reason": answer.finish_reason}]}
                self._chunk(f"data: {json.dumps(end)}\n\n")
                self._chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _chunk(self, text: str) -> None:
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.httpd = _Quiet(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="model server", daemon=True)

    def __enter__(self) -> "ModelServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        import sys

        # A client that gave up (its timeout) or a drop the scenario made: expected, not news.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, OSError)):
            super().handle_error(request, client_address)


def _completion(body: dict, answer: Answer) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": answer.finish_reason, "message": {
                "role": "assistant", "content": answer.content, "refusal": answer.refusal}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
