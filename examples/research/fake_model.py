"""A scripted stand-in for the research agent's model: an OpenAI-compatible chat completions
endpoint on 127.0.0.1 that answers every request from what it says, the same way every time,
so the example runs offline and its runs can be compared.

    python3 fake_model.py [--port 8732]

prints `OPENAI_BASE_URL=http://127.0.0.1:PORT/v1` on its first line, then serves until stopped.

The script, keyed on the system message (planner or writer) and on the attempt (a repair prompt
says "Your answer to attempt N did not fit"):

- planner, first attempt: `queries` as one string instead of a list, which does not decode as a
  `Plan`; the repair: three queries built from the question's words.
- writer, first attempt: a claim that cites a source past the end of the list, which the
  program's check refuses; the repair: one claim per source given, citing each.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def attempt_of(prompt: str) -> int:
    repaired = re.findall(r"Your answer to attempt (\d+) did not fit", prompt)
    return int(repaired[-1]) + 1 if repaired else 1


def plan(prompt: str) -> dict:
    question = prompt.split("answer: ", 1)[-1].split("\n", 1)[0].rstrip("?")
    topic = "four-day week" if "four-day" in question.lower() else question
    queries = [f"{topic} trial productivity study", f"{topic} public sector", f"{topic} burnout employees"]
    if attempt_of(prompt) == 1:
        return {"queries": "; ".join(queries), "focus": "evidence from trials"}
    return {"queries": queries, "focus": "evidence from trials"}


def report(prompt: str) -> dict:
    sources = re.findall(r"^\[(\d+)\] (.*?) \((https?://\S+)\): (.*)$", prompt, re.MULTILINE)
    if attempt_of(prompt) == 1:
        return {"summary": "Draft.", "claims": [{"text": "An uncited claim.", "source": len(sources) + 6}],
                "confidence": "Low"}
    claims = [{"text": snippet, "source": int(number)} for number, _, _, snippet in sources]
    asks = re.search(r"^The approver asks: (.*)$", prompt, re.MULTILINE)
    summary = (f"{len(sources)} sources agree that shorter weeks kept output level in the trials"
               + (f" ({asks.group(1)})" if asks else "") + ".")
    return {"summary": summary, "claims": claims, "confidence": "Medium" if len(sources) < 3 else "High"}


def answer(request: dict) -> str:
    messages = request["messages"]
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if "You plan" in system:
        return json.dumps(plan(prompt))
    if "You answer" in system:
        return json.dumps(report(prompt))
    return json.dumps({"error": "no script for this system message"})


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
    parser.add_argument("--port", type=int, default=8732, help="0 picks a free one")
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
