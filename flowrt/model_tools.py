"""Models as Tools: a flow.toml binding that answers a Tool's calls from an OpenAI-compatible chat
completions endpoint, through the official `openai` SDK (docs/cli.md, "Models as Tools").

The Tool's `prompt: Text` (and optional `system: Text`) are the messages; the type its reply is
decoded at (a generic Tool's `T` at this call, else the declared ok type) is sent as a strict JSON
Schema response format, or, where the endpoint has none (`structured = false`), described in the
system message. A Text result asks for plain text. The model's JSON is handed to the host as the
Ok value: the host admits it against the declared type, so a reply that does not fit is BadReply
with the path where it stops fitting, as for any implementation.

What went wrong is said as honestly as the transport lets us: a connection that was never made
is NotRun (nothing reached the endpoint); a timeout or a connection lost after the request went
out is Unknown (the endpoint may have acted); a 4xx answer, a refusal or a content-filter stop is
the Tool's `Failed` where its error type can hold the message text, else BadReply; a 5xx is
Unknown; a 2xx that is not a chat completion is BadReply.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flowrt.bindings import BindError, Deliver, Implementation

DEFAULT_TIMEOUT = 120.0  # seconds for one completion; a binding's `timeout` overrides it
PROMPT_PARAMS = ("prompt", "system")


@dataclass(frozen=True)
class ModelSpec:
    """A flow.toml model binding, its values resolved from the environment where flow.toml is silent."""

    key: str
    model: str
    base_url: str | None
    api_key: str
    timeout: float
    stream: bool
    structured: bool


MODEL_KEYS = frozenset({"openai", "model", "base_url", "api_key_env", "timeout", "stream", "structured"})


def is_model_entry(spec: Mapping[str, Any]) -> bool:
    """A `[tools]` table entry that binds a model: it names a `model`, or says `openai = true`
    (the model then comes from FLOW_MODEL)."""
    return "model" in spec or spec.get("openai") is True


def read_model_spec(path: str, key: str, spec: Mapping[str, Any], environ: Mapping[str, str]) -> ModelSpec:
    """Check a model entry and resolve what it leaves to the environment; BindError says what is wrong."""

    def bad(what: str) -> BindError:
        return BindError(f"{path}: tools.{key}{what}", key=key)

    unknown = sorted(set(spec) - MODEL_KEYS)
    if unknown:
        raise bad(f" has {', '.join(unknown)}, which a model binding does not take "
                  f"(it takes {', '.join(sorted(MODEL_KEYS))})")
    if "openai" in spec and spec["openai"] is not True:
        raise bad(".openai must be true (or leave it out and name a model)")
    for name in ("model", "base_url", "api_key_env"):
        if name in spec and (not isinstance(spec[name], str) or not spec[name]):
            raise bad(f".{name} must be a non-empty string")
    for name in ("stream", "structured"):
        if name in spec and not isinstance(spec[name], bool):
            raise bad(f".{name} must be true or false")
    timeout = spec.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86400:
        raise bad(".timeout must be a number of seconds, above 0 and at most 86400")
    model = spec.get("model") or environ.get("FLOW_MODEL")
    if not model:
        raise bad(" names no model: give it model = \"...\" or set FLOW_MODEL")
    key_env = spec.get("api_key_env", "OPENAI_API_KEY")
    api_key = environ.get(key_env)
    if not api_key:
        raise bad(f" needs an API key in the environment variable {key_env}, which is not set "
                  "(an endpoint that takes no key: set it to any text)")
    base_url = spec.get("base_url") or environ.get("OPENAI_BASE_URL") or None
    return ModelSpec(key, model, base_url, api_key, float(timeout), spec.get("stream", False),
                     spec.get("structured", True))


def check_tool(identity: str, description: Mapping[str, Any]) -> str | None:
    """Why a Tool cannot be served by a model (None when it can): its parameters must be
    `prompt: Text` and optionally `system: Text`, the only text a chat turn carries."""
    params = {p["name"]: p["type"] for p in description.get("params", [])}
    if "prompt" not in params:
        return f"{identity} has no `prompt: Text` parameter, which a model binding sends as the user message"
    for name, term in params.items():
        if name not in PROMPT_PARAMS:
            return f"{identity} has a parameter `{name}`: a model binding takes only `prompt: Text` and `system: Text`"
        if term != "Text":
            return f"{identity}'s parameter `{name}` must be Text for a model binding"
    return None


def consent(entry: Any) -> tuple[str, ...] | None:
    """What must be approved before a model entry is used, as an approval's `command`: an
    endpoint that flow.toml itself names receives the API key from the environment and the
    program's prompts, so a flow.toml from elsewhere (a cloned repository) must not pick it
    unasked. An endpoint from OPENAI_BASE_URL, or the SDK's default, is the user's own choice."""
    base_url = entry.model.get("base_url")
    if not isinstance(base_url, str) or not base_url:
        return None
    key_env = entry.model.get("api_key_env", "OPENAI_API_KEY")
    return ("send", "prompts", "and", f"${key_env}", "to", base_url)


def bind(models: dict[str, "ModelTools"], manifest_path: str, entry: Any, identity: str,
         description: Mapping[str, Any]) -> "ModelTools":
    """The implementation of Tool `identity` bound by flow.toml model entry `entry` (a
    `bindings.ManifestEntry`): one client per entry, kept in `models`. BindError when the entry
    or the Tool cannot be served, which refuses the run before its first fact."""
    reason = check_tool(identity, description)
    if reason is not None:
        raise BindError(f"{manifest_path}: tools.{entry.key}: {reason}", key=entry.key)
    if entry.key not in models:
        spec = read_model_spec(manifest_path, entry.key, entry.model, os.environ)
        try:
            models[entry.key] = ModelTools(spec)
        except ImportError as problem:
            raise BindError(f"{manifest_path}: tools.{entry.key} binds a model, which needs the `openai` package "
                            f"({problem}): pip install 'flow-lang[models]'", key=entry.key) from None
    return models[entry.key]


class ModelTools(Implementation):
    """Serves a module's Tools from one chat completions endpoint; each call on a thread of its own."""

    def __init__(self, spec: ModelSpec) -> None:
        import openai  # only runs that bind a model pay for the SDK

        self.spec = spec
        self.openai = openai
        # No retries in the SDK: a retry after a broken connection would make an Unknown look
        # like a clean answer, and one after a refused connection would hide a NotRun. Flow
        # programs decide on retries themselves, from the outcome.
        self.client = openai.OpenAI(api_key=spec.api_key, base_url=spec.base_url, timeout=spec.timeout,
                                    max_retries=0)
        self.lock = threading.Lock()
        self.cancelled: set[str] = set()

    def call(self, run, call_id, tool, arguments, types, deliver: Deliver) -> None:
        # A daemon thread per call (a completion takes seconds; a thread costs microseconds): a
        # host that halts or ends does not wait at exit for requests still out, as it would for
        # a pool's workers.
        threading.Thread(target=self._serve, args=(call_id, arguments, types, deliver), name=f"model {call_id}",
                         daemon=True).start()

    def _serve(self, call_id: str, arguments: dict, typed: Any, deliver: Deliver) -> None:
        try:
            outcome = self.complete(call_id, arguments, typed)
        except Exception as problem:  # a host bug must not leave the call out waiting forever
            outcome = {"Err": {"Unknown": f"the model binding failed: {type(problem).__name__}: {problem}"}}
        with self.lock:
            if call_id in self.cancelled:
                self.cancelled.discard(call_id)
                return
        deliver(call_id, outcome)

    def complete(self, call_id: str, arguments: dict, typed: Any) -> dict:
        """One chat completion for a call: the outcome the host admits."""
        wanted = WantedReply.of(typed)
        messages = []
        system = arguments.get("system")
        if wanted.schema is not None and not self.spec.structured:
            described = ("Answer with one JSON value and nothing else, matching this JSON Schema:\n"
                         + json.dumps(wanted.schema, sort_keys=True))
            system = f"{system}\n\n{described}" if system else described
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": arguments["prompt"]})
        request: dict[str, Any] = {"model": self.spec.model, "messages": messages}
        if wanted.schema is not None and self.spec.structured:
            request["response_format"] = {"type": "json_schema", "json_schema": {
                "name": wanted.name, "schema": wanted.schema, "strict": wanted.strict}}
        broken = (self.openai.APIConnectionError, *self._transport_errors())
        try:
            if self.spec.stream:
                answer = self._streamed(call_id, request)
            else:
                answer = self._whole(request)
        except self.openai.APIStatusError as problem:
            return self._status(problem, typed)
        except broken as problem:
            return {"Err": {transport_kind(problem): f"{self._endpoint()}: {describe_transport(problem)}"}}
        except (NotAnAnswer, ValueError) as problem:  # ValueError: the SDK's JSON decoding
            return {"Err": {"BadReply": f"{self._endpoint()} answered with something that is not a chat completion "
                                        f"({problem})"}}
        if answer.refusal:
            return failed(typed, f"the model refused: {answer.refusal}", prefer="Refused")
        if answer.finish_reason == "content_filter":
            return failed(typed, "the endpoint's content filter stopped the answer", prefer="Refused")
        if answer.content is None:
            return {"Err": {"BadReply": "the model's answer has no content"}}
        return wanted.outcome(answer.content)

    def _whole(self, request: dict) -> "Answer":
        completion = self.client.chat.completions.create(**request)
        # The SDK builds its objects without checking them: an endpoint that is not one (an HTML
        # page, another API's JSON) comes back as a string or a hollow object.
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise NotAnAnswer("no choices")
        message = getattr(choices[0], "message", None)
        content, refusal = getattr(message, "content", None), getattr(message, "refusal", None)
        if not isinstance(content, (str, type(None))) or not isinstance(refusal, (str, type(None))):
            raise NotAnAnswer("its message's content or refusal is not text")
        return Answer(content, refusal, getattr(choices[0], "finish_reason", None))

    def _streamed(self, call_id: str, request: dict) -> "Answer":
        content: list[str] = []
        refusal: list[str] = []
        seen = False
        finish = None
        with self.client.chat.completions.create(**request, stream=True) as chunks:
            for chunk in chunks:
                with self.lock:
                    if call_id in self.cancelled:
                        break  # nobody waits for the rest; leaving closes the connection
                choices = getattr(chunk, "choices", None)
                if not isinstance(choices, list):
                    raise NotAnAnswer("a chunk has no choices")
                for choice in choices[:1]:
                    seen = True
                    delta = getattr(choice, "delta", None)
                    piece, refused = getattr(delta, "content", None), getattr(delta, "refusal", None)
                    if not isinstance(piece, (str, type(None))) or not isinstance(refused, (str, type(None))):
                        raise NotAnAnswer("a chunk's content or refusal is not text")
                    content.append(piece or "")
                    refusal.append(refused or "")
                    finish = getattr(choice, "finish_reason", None) or finish
        if not seen:
            raise NotAnAnswer("the stream carried no choice")
        return Answer("".join(content), "".join(refusal) or None, finish)

    def _transport_errors(self) -> tuple[type, ...]:
        # A stream's body is read after the SDK hands it over: a break there is the HTTP
        # client's own error, not wrapped in APIConnectionError.
        return tuple(http.TransportError for http in _http_modules())

    def _status(self, problem, typed: Any) -> dict:
        status = problem.status_code
        text = _status_message(problem)
        if status >= 500:
            # The endpoint failed while serving it: whether the model ran is not known.
            return {"Err": {"Unknown": f"{self._endpoint()} answered {status}: {text}"}}
        return failed(typed, f"{self._endpoint()} answered {status}: {text}")

    def _endpoint(self) -> str:
        return str(self.client.base_url).rstrip("/")

    def cancel(self, call_id: str) -> None:
        # The SDK's blocking request cannot be interrupted from here; its answer is dropped.
        with self.lock:
            self.cancelled.add(call_id)

    def close(self) -> None:
        self.client.close()

    def label(self) -> str:
        return f"model {self.spec.model} at {self._endpoint()}"


class NotAnAnswer(Exception):
    """The endpoint answered 2xx with something that is not a chat completion."""


@dataclass(frozen=True)
class Answer:
    content: str | None
    refusal: str | None
    finish_reason: str | None


def _http_modules() -> list:
    """The HTTP client packages the SDK may be built on (`httpx`; `httpx2` in newer releases)."""
    import importlib

    found = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


def transport_kind(problem: BaseException) -> str:
    """NotRun when the request provably never left (no connection was made), else Unknown."""
    for http in _http_modules():
        cause: BaseException | None = problem
        while cause is not None:
            if isinstance(cause, (http.ConnectError, http.ConnectTimeout, http.PoolTimeout)):
                return "NotRun"
            cause = cause.__cause__ or cause.__context__
    return "Unknown"


def describe_transport(problem: BaseException) -> str:
    kind = transport_kind(problem)
    cause = problem.__cause__ or problem
    detail = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    if kind == "NotRun":
        return f"no connection was made, nothing was sent ({detail})"
    if "Timeout" in type(problem).__name__ or "Timeout" in type(cause).__name__:
        return f"no answer in time after the request was sent ({detail})"
    return f"the connection broke after the request was sent ({detail})"


def _status_message(problem) -> str:
    body = getattr(problem, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    return getattr(problem, "message", None) or str(problem)


def failed(typed: Any, text: str, prefer: str | None = None) -> dict:
    """`Failed` carrying `text` in the Tool's declared error type, where that type can hold a
    text: the type Text itself, or an enum constructor with a single Text payload (`prefer` if it
    has one of that name, else the first in declaration order). A type that cannot hold it, or a
    Tool declared without Result, gets BadReply with the text: the endpoint's answer does not fit
    what the Tool declares it can say."""
    value = _error_value(typed, text, prefer) if typed is not None else None
    if value is None:
        return {"Err": {"BadReply": f"{text} (the Tool's error type cannot hold this message)"}}
    return {"Err": {"Failed": value[0]}}


def _error_value(typed: Any, text: str, prefer: str | None) -> tuple[Any] | None:
    err = typed.err
    if err == "Text":
        return (text,)
    if not (isinstance(err, dict) and set(err) == {"Named"}):
        return None
    declaration = typed.defs.get(err["Named"])
    if not isinstance(declaration, dict):
        return None
    (_, body), = declaration["kind"].items()
    holding = [c["name"] for c in (body.get("ctors") or [])
               if (c.get("payload") or {}).get("positional") == ["Text"]]
    if not holding:
        return None
    name = prefer if prefer in holding else holding[0]
    return ({name: text},)


@dataclass(frozen=True)
class WantedReply:
    """What the model is asked for: plain text (schema None), or JSON fitting `schema`;
    `wrapped` when the type is not an object and the strict format needs one at the root."""

    schema: dict | None
    name: str
    wrapped: bool
    #: whether the schema is inside what strict mode accepts (else it is sent with strict false)
    strict: bool = True

    @classmethod
    def of(cls, typed: Any) -> "WantedReply":
        term = typed.ok if typed is not None else "Text"
        if term == "Text":
            return cls(None, "text", False)
        from flowrt.schemas import schema as schema_of

        full = schema_of(term, typed.defs)
        defs = full.pop("$defs", None)
        full.pop("$schema", None)
        body = strict_subset(full)
        defs = {k: strict_subset(v) for k, v in defs.items()} if defs else None
        if set(body) == {"$ref"} and defs:
            # The strict format wants an object at the root, not a reference to one: a record is
            # put there itself (its own `$ref`s, if it is recursive, still find it in `$defs`).
            named = defs.get(_unref(body["$ref"]))
            if isinstance(named, dict) and named.get("type") == "object":
                body = dict(named)
        wrapped = body.get("type") != "object"
        if wrapped:
            body = {"type": "object", "properties": {"value": body}, "required": ["value"],
                    "additionalProperties": False}
        if defs:
            body["$defs"] = defs
        return cls(body, _schema_name(term), wrapped, strict_expressible(body))

    def outcome(self, content: str) -> dict:
        if self.schema is None:
            return {"Ok": content}
        from flowdata import codec

        try:
            value = codec.parse_json(content.encode("utf-8"))
        except codec.DecodeError as problem:
            shown = content[:80] + ("..." if len(content) > 80 else "")
            return {"Err": {"BadReply": f"the model's reply is not JSON ({problem.message}): {shown!r}"}}
        if self.wrapped:
            if not (isinstance(value, dict) and set(value) == {"value"}):
                return {"Err": {"BadReply": "$: expected an object with the one property `value`, "
                                            "as the response format asked"}}
            value = value["value"]
        return {"Ok": value}


def _unref(ref: str) -> str:
    from urllib.parse import unquote

    return unquote(ref.rsplit("/", 1)[-1]).replace("~1", "/").replace("~0", "~")


def strict_subset(schema: Any) -> Any:
    """The host's JSON Schema in the subset strict structured outputs accept: `oneOf` is
    `anyOf` (the shapes of an enum's constructors never overlap, so the two agree), `const` is a
    one-value `enum`, and annotations the subset rejects are dropped (the host checks the reply
    against the full type anyway)."""
    if isinstance(schema, list):
        return [strict_subset(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("contentEncoding", "$comment", "uniqueItems"):
            continue
        if key == "oneOf":
            out["anyOf"] = strict_subset(value)
        elif key == "const":
            out["enum"] = [value]
        elif key in ("properties", "$defs"):
            out[key] = {k: strict_subset(v) for k, v in value.items()}
        else:
            out[key] = strict_subset(value)
    return out


def strict_expressible(schema: Any) -> bool:
    """Whether strict structured outputs can take `schema`: every object closed with all its
    properties required, no tuple (`prefixItems`), no schema that allows anything (`json.Value`,
    `{}`) or nothing (`not`). A type outside it (a `Dict<Text, V>`, a tuple, `json.Value`) is
    still sent as the response format, with `strict: false`, and the host checks the answer."""
    if isinstance(schema, list):
        return all(strict_expressible(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if not schema or "not" in schema or "prefixItems" in schema:
        return False
    if schema.get("type") == "object" and (
            schema.get("additionalProperties") is not False
            or set(schema.get("required", [])) != set(schema.get("properties", {}))):
        return False
    return all(strict_expressible(v) for k, v in schema.items() if isinstance(v, (dict, list)) and k != "enum")


def _schema_name(term: Any) -> str:
    """A response format's name: letters, digits, `_` and `-`, at most 64 (the API's rule)."""
    text = json.dumps(term, sort_keys=True) if not isinstance(term, str) else term
    if isinstance(term, dict) and set(term) == {"Named"}:
        text = term["Named"]
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in text).strip("_") or "reply"
    return name[:64]
