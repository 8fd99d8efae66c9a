"""A scripted stand-in for the pipeline's model: an OpenAI-compatible chat completions endpoint
on 127.0.0.1 that answers every request from what it says, the same way every time, so the
example runs offline and its runs can be compared.

    python3 fake_model.py [--port 8731]

prints `OPENAI_BASE_URL=http://127.0.0.1:PORT/v1` on its first line, then serves until stopped.

The script, keyed on the document named in the prompt and on which attempt this is (a repair
prompt says "Your answer to attempt N did not fit"):

- inv-7: first a severity of 9, which the program's check refuses; the repair is a good answer.
- bug-12: first a category the schema does not have; the repair is a good answer.
- q-3: a good answer whose quote is not in the document, so a person is asked to review it.
- any id starting with `broken`: never JSON, so every repair fails (seed 001's output-validation).
- any other document: a good answer quoting its first sentence.
- a request without a response format (the digest): a summary counting the findings it lists.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GOOD = {
    "inv-7": {"title": "Charged twice for invoice 7", "category": "Billing", "severity": 3,
              "quote": "I was charged twice for invoice 7."},
    "bug-12": {"title": "Export crashes on Safari", "category": "Bug", "severity": 4,
               "quote": "The export button crashes the app on Safari."},
    "q-3": {"title": "How to change the account email", "category": "Question", "severity": 1,
            "quote": "How can I update my e-mail?"},
}

FIRST_TRY = {
    "inv-7": dict(GOOD["inv-7"], severity=9),
    "bug-12": dict(GOOD["bug-12"], category="Crash"),
}


def extraction(prompt: str) -> str:
    found = re.search(r"^Document: (\S+)$", prompt, re.MULTILINE)
    document = found.group(1) if found else "?"
    repaired = re.search(r"Your answer to attempt (\d+) did not fit", prompt)
    attempt = int(repaired.group(1)) + 1 if repaired else 1
    if document.startswith("broken"):
        return f"Sorry, I cannot answer in JSON (attempt {attempt})."
    if attempt == 1 and document in FIRST_TRY:
        return json.dumps(FIRST_TRY[document])
    if document in GOOD:
        return json.dumps(GOOD[document])
    body = prompt.split("\n\n", 1)[-1].split("\n\nYour answer", 1)[0]
    sentence = body.split(".")[0].strip() + "."
    return json.dumps({"title": sentence[:60], "category": "Other", "severity": 2, "quote": sentence})


def summary(prompt: str) -> str:
    items = [line[2:] for line in prompt.splitlines() if line.startswith("- ")]
    worst = max((int(m) for m in re.findall(r"severity (\d+)", prompt)), default=0)
    return (f"{len(items)} findings this batch, the worst of severity {worst}: "
            + "; ".join(item.split(": ", 1)[-1] for item in items) + ".")


def answer(request: dict) -> str:
    prompt = next((m["content"] for m in reversed(request["messages"]) if m["role"] == "user"), "")
    return extraction(prompt) if "response_format" in request else summary(prompt)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid"}})
        completion = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                      "model": request.get("model", "?"),
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": answer(request)}}]}
        self._send(200, completion)

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8731, help="0 picks a free one")
    server = ThreadingHTTPServer(("127.0.0.1", parser.parse_args().port), Handler)
    server.daemon_threads = True
    print(f"OPENAI_BASE_URL=http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
