"""A fake extraction model for the shipping example: an OpenAI-compatible chat completions
endpoint on 127.0.0.1 that answers from a fixed script, so the example runs offline and the same
way every time.

    python fake_model.py [--port 8765]

It serves POST /v1/chat/completions (whole answers and `stream: true`). The answer is keyed on
the person's latest message, which the flow puts between <<< and >>> in the prompt; a message
the script does not know gets all fields null (a model that found nothing). Like a real model, the
script sometimes offers a value the person never wrote (the first answer's postcode): the flow's
never-guess guard must refuse it. Each answer is checked against the request's response format,
so a flow that stops asking for the `Draft` schema gets a 400 rather than a silent answer.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIELDS = ("name", "street", "city", "postcode")

#: The person's message -> the fields the model "extracts" from it.
SCRIPT: dict[str, dict[str, str]] = {
    # The person gave no postcode; the model guesses one that fits the city.
    "Hi! Please ship my order to Ada Lovelace, 12 Harbour Road, Portsmouth.":
        {"name": "Ada Lovelace", "street": "12 Harbour Road", "city": "Portsmouth", "postcode": "PO1 1AA"},
    "It's PO1 3AX.": {"postcode": "PO1 3AX"},
    # A complete address the carrier will only take with a customs declaration.
    "Send it to Brian Ode, 4 Castle Street, Belfast BT1 1AA please":
        {"name": "Brian Ode", "street": "4 Castle Street", "city": "Belfast", "postcode": "BT1 1AA"},
}

MESSAGE = re.compile(r"<<<(.*?)>>>", re.DOTALL)


def answer_for(body: dict) -> tuple[int, dict | str]:
    """The status and content (a JSON object, or an error message) for one request."""
    messages = body.get("messages") or []
    prompt = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
    found = MESSAGE.search(prompt)
    if found is None:
        return 400, "the prompt holds no <<<message>>>"
    form = (body.get("response_format") or {}).get("json_schema") or {}
    properties = (form.get("schema") or {}).get("properties") or {}
    if set(properties) != set(FIELDS):
        return 400, f"expected a response format with the fields {', '.join(FIELDS)}"
    extracted = SCRIPT.get(found.group(1).strip(), {})
    return 200, {field: extracted.get(field) for field in FIELDS}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        except ValueError:
            return self._send(400, {"error": {"message": "the body is not JSON", "type": "invalid_request"}})
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        status, content = answer_for(body)
        if status != 200:
            return self._send(status, {"error": {"message": content, "type": "invalid_request"}})
        text = json.dumps(content, sort_keys=True)
        model = body.get("model", "fake")
        if body.get("stream"):
            return self._stream(model, text)
        self._send(200, {"id": "chatcmpl-shipping", "object": "chat.completion", "created": 0, "model": model,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text, "refusal": None}}],
                         "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, model: str, text: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for delta, finish in (({"role": "assistant", "content": text}, None), ({}, "stop")):
            chunk = {"id": "chatcmpl-shipping", "object": "chat.completion.chunk", "created": 0, "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            self._chunk(f"data: {json.dumps(chunk)}\n\n")
        self._chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765, help="the port on 127.0.0.1 (0: any free one)")
    port = parser.parse_args().port
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    # The first line says where it listens, so a caller that asked for port 0 learns the port.
    print(f"fake model listening on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
