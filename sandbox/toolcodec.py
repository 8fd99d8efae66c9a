"""Values across the pipe, per Tool: a call's arguments encoded by the types its declaration
gives them, a reply decoded by its declared result (`flowdata.codec` does the encoding by type term).
The encoders of a Tool without type arguments are built once and kept; a call with type
arguments substitutes them into the declaration first."""

from __future__ import annotations

from flowdata import codec as abi
from sandbox import runtime as R


class ToolCodec:
    """The encoders and decoders of the Tools the load message describes."""

    def __init__(self, tools: dict) -> None:
        self.tools = tools
        #: per Tool, what encoding its arguments and decoding its replies needs (no type args)
        self.codecs: dict = {}

    def codec(self, identity: str) -> tuple:
        """A Tool's argument encoders and reply decoder (for calls without type arguments)."""
        codec = self.codecs.get(identity)
        if codec is None:
            tool = self.tools[identity]
            defs = tool.get("types", {})
            codec = ([abi.encoder(p["type"], defs) for p in tool["params"]],
                     abi.outcome_decoder(tool["ok"], tool.get("err"), defs), tool.get("err") is None,
                     abi.decoder(tool["ok"], defs))
            self.codecs[identity] = codec
        return codec

    def encode_arguments(self, desc, args, type_args) -> dict:
        if not type_args and desc.identity in self.tools:
            encoders = self.codec(desc.identity)[0]
            if len(encoders) >= len(desc.params):
                return {name: encode(value) for name, value, encode in zip(desc.params, args, encoders)}
        tool = self.tools.get(desc.identity)
        out = {}
        for index, (name, value) in enumerate(zip(desc.params, args)):
            if tool is None:
                out[name] = R.to_json(value)
                continue
            term = tool["params"][index]["type"]
            defs = dict(tool.get("types", {}))
            term = _substitute(term, tool, type_args, defs)
            out[name] = abi.encode(value, term, defs)
        return out

    def decode_reply(self, desc, outcome: dict, type_args):
        """The value a reply hands the calling task; a Tool without Result that ended in a
        problem raises the fault it is."""
        if type_args:
            tool = self.tools[desc.identity]
            defs = dict(tool.get("types", {}))
            ok = _substitute(tool["ok"], tool, type_args, defs)
            err = tool.get("err")
            if err is not None:
                err = _substitute(err, tool, type_args, defs)
            result = abi.decode_outcome(outcome, ok, err, defs)
            faults = err is None
        else:
            _, decode, faults, decode_ok = self.codec(desc.identity)
            if faults and type(outcome) is dict and len(outcome) == 1 and "Ok" in outcome:
                # The common reply of a Tool without Result: its value, as decode_outcome would
                # give it (anything else goes the full way, which says why it is a BadReply).
                try:
                    return decode_ok(outcome["Ok"])
                except abi.DecodeError:
                    pass
            result = decode(outcome)
        if faults:
            if result[0] == "Ok":
                return result[1]
            problem = result[1]
            raise R.Fault("tool-problem", f"{desc.identity} ended in {problem[0]}: {problem[1] if len(problem) > 1 else ''}")
        return result


def _substitute(term, tool: dict, type_args, defs: dict):
    if not type_args:
        return term
    names = tool.get("type_params", [])
    mapping = {}
    for name, arg in zip(names, type_args):
        mapping[name] = arg.term
        defs.update(arg.defs)
    return _subst(term, mapping)


def _subst(term, mapping):
    if isinstance(term, dict):
        if "Param" in term:
            return mapping.get(term["Param"], term)
        return {k: _subst(v, mapping) for k, v in term.items()}
    if isinstance(term, list):
        return [_subst(v, mapping) for v in term]
    return term
