# An implementation of `main.ask` that answers from the JSON Schema the call message carries, as a
# structured-output model would: an object gets each required property, an array one item, an
# integer 3, a string the prompt. It logs each call's type terms on stderr.
import sys

from flowrt.toolkit import serve


def example(schema, defs):
    if "$ref" in schema:
        return example(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    kind = schema.get("type")
    if kind == "object":
        return {name: example(schema["properties"][name], defs) for name in schema.get("required", [])}
    if kind == "array":
        return [example(schema["items"], defs)]
    if kind == "integer":
        return 3
    return "from the schema"


def ask(prompt, call):
    wanted = call.schemas["T"]
    print(f"ask {call.run} {call.call} {call.tool} {call.types['T']} outcome-schema={call.outcome_schema is not None}",
          file=sys.stderr, flush=True)
    return example(wanted, wanted.get("$defs", {}))


serve({"main.ask": ask}, declared_in="main.flow")
