"""Pathological program shapes for the front end: deep nesting of every kind the grammar allows,
and long flat lists of every kind. `SHAPES[name](n)` is a whole module (a `main.flow`) of size n:
n levels deep, or n items long.

tests/test_pathological.py checks each through `flow check` and `flow run`;
scripts/reliability/check_fuzz.py times them per input size.
"""

from __future__ import annotations

from typing import Callable


def _main(type_: str, body: str) -> str:
    return f"pub flow main() -> {type_} = {body}\n"


def _via(params: str, type_: str, body: str, argument: str) -> str:
    """`body` in a flow `f(params)`, and a `main()` calling it with `argument` (`flow run` gives
    main no input)."""
    return f"flow f({params}) -> {type_} = {body}\npub flow main() -> {type_} = f({argument})\n"


def deep_type(n: int) -> str:
    return f"flow f(x: {'List<' * n}Int{'>' * n}) -> Int = 1\npub flow main() -> Int = f([])\n"


def deep_type_decl(n: int) -> str:
    return f"type Deep {{ field: {'Option<' * n}Int{'>' * n} }}\npub flow main() -> Int = 1\n"


def deep_fn_type(n: int) -> str:
    return f"flow apply(f: {'flow() -> ' * n}Int) -> Int = 1\npub flow main() -> Int = 1\n"


def deep_parens(n: int) -> str:
    return _main("Int", "(" * n + "1" + ")" * n)


def deep_lists(n: int) -> str:
    return _main("Int", f"{{ let x = {'[' * n}1{']' * n}\n 1 }}")


def deep_records(n: int) -> str:
    return ("type Box { inner: Option<Box> }\n"
            + _main("Box", "Box { inner: Some(" * n + "Box { inner: None }" + ") }" * n))


def deep_unary_minus(n: int) -> str:
    return _main("Int", "- " * n + "1")


def deep_not(n: int) -> str:
    return _main("Bool", "!" * n + "true")


def deep_return(n: int) -> str:
    return _main("Int", "return " * n + "1")


def deep_lambda(n: int) -> str:
    return _main("Int", f"{{ let f = {'flow() = ' * n}1\n 1 }}")


def deep_if(n: int) -> str:
    return _main("Int", "if true { " * n + "1" + " } else { 2 }" * n)


def else_if_chain(n: int) -> str:
    return _via("x: Int", "Int", "".join(f"if x == {i} {{ {i} }} else " for i in range(n)) + "{ 0 }", "3")


def deep_match(n: int) -> str:
    return _via("x: Int", "Int", "match x { 0 => " * n + "1" + ", _ => 2 }" * n, "0")


def deep_blocks(n: int) -> str:
    return _main("Int", "{ " * n + "1" + " }" * n)


def deep_pattern(n: int) -> str:
    return _via("x: Int", "Int", "match x { " + "(" * n + "_" + ")" * n + " => 1 }", "1")


def deep_interpolation(n: int) -> str:
    inner = "x"
    for _ in range(n):
        inner = '"${' + inner + '}"'
    return _via("x: Text", "Text", inner, '"a"')


def member_chain(n: int) -> str:
    return "type R { r: Int, s: Option<R> }\n" + _via("x: R", "R", "x" + ".s" * n, "R { r: 1, s: None }")


def call_chain(n: int) -> str:
    return "flow apply(f: flow() -> Int) -> Int = f" + "()" * n + "\npub flow main() -> Int = 1\n"


def try_chain(n: int) -> str:
    return _via("x: Result<Int, Text>", "Result<Int, Text>", "Ok(x" + "?" * n + ")", "Ok(1)")


def add_chain(n: int) -> str:
    return _via("a: Int", "Int", "a" + " + a" * n, "1")


def mixed_chain(n: int) -> str:
    ops = ["+", "*", "-", "+", "%", "*"]
    return _via("a: Int", "Int", "a" + "".join(f" {ops[i % len(ops)]} a" for i in range(n)), "3")


def and_chain(n: int) -> str:
    return _via("a: Bool", "Bool", "a" + " && a" * n, "true")


def concat_chain(n: int) -> str:
    return _via("a: Text", "Text", "a" + " ++ a" * n, '"a"')


def match_arms(n: int) -> str:
    arms = "".join(f"    {i} => {i},\n" for i in range(n))
    return _via("x: Int", "Int", f"match x {{\n{arms}    _ => 0,\n}}", "7")


def text_arms(n: int) -> str:
    arms = "".join(f'    "k{i}" => {i},\n' for i in range(n))
    return _via("x: Text", "Int", f"match x {{\n{arms}    _ => 0,\n}}", '"k1"')


def enum_arms(n: int) -> str:
    ctors = ", ".join(f"C{i}" for i in range(n))
    arms = "".join(f"    C{i} => {i},\n" for i in range(n))
    return f"type E {{ {ctors} }}\n" + _via("x: E", "Int", f"match x {{\n{arms}}}", "C0")


def or_pattern(n: int) -> str:
    return _via("x: Int", "Int", "match x { " + " | ".join(str(i) for i in range(n)) + " => 1, _ => 0 }", "2")


def record_fields(n: int) -> str:
    fields = ", ".join(f"f{i}: Int" for i in range(n))
    inits = ", ".join(f"f{i}: {i}" for i in range(n))
    return f"type R {{ {fields} }}\npub flow main() -> Int = R {{ {inits} }}.f{n - 1}\n"


def record_pattern(n: int) -> str:
    fields = ", ".join(f"f{i}: Int" for i in range(n))
    binds = ", ".join(f"f{i}" for i in range(n))
    inits = ", ".join(f"f{i}: {i}" for i in range(n))
    return f"type R {{ {fields} }}\n" + _via("r: R", "Int", f"match r {{ R {{ {binds} }} => f0 }}", f"R {{ {inits} }}")


def record_literal_pattern(n: int) -> str:
    fields = ", ".join(f"f{i}: Int" for i in range(n))
    pats = ", ".join(f"f{i}: {i}" for i in range(n))
    inits = ", ".join(f"f{i}: {i}" for i in range(n))
    other = ", ".join(f"f{i}: {i + 1}" for i in range(n))
    arms = f"R {{ {pats} }} => 1, R {{ {other} }} => 2, _ => 0"
    return f"type R {{ {fields} }}\n" + _via("r: R", "Int", f"match r {{ {arms} }}", f"R {{ {inits} }}")


def list_elements(n: int) -> str:
    return _main("List<Int>", "[" + ", ".join(str(i) for i in range(n)) + "]")


def tuple_elements(n: int) -> str:
    return _main("Int", f"{{ let t = ({', '.join(str(i) for i in range(n))})\n 1 }}")


def call_arguments(n: int) -> str:
    params = ", ".join(f"p{i}: Int" for i in range(n))
    return f"flow f({params}) -> Int = p0\npub flow main() -> Int = f({', '.join(str(i) for i in range(n))})\n"


def lets(n: int) -> str:
    body = "".join(f"    let x{i} = {i}\n" for i in range(n))
    return f"pub flow main() -> Int = {{\n{body}    x0\n}}\n"


def guards(n: int) -> str:
    body = "".join(f"    guard x != {i} else {{ return {i} }}\n" for i in range(n))
    return _via("x: Int", "Int", f"{{\n{body}    x\n}}", "-1")


def functions(n: int) -> str:
    return "".join(f"flow f{i}(x: Int) -> Int = x + {i}\n" for i in range(n)) + "pub flow main() -> Int = f0(1)\n"


def call_graph(n: int) -> str:
    """n functions, each calling the next: a long chain through the call graph."""
    return ("".join(f"flow f{i}(x: Int) -> Int = f{i + 1}(x)\n" for i in range(n))
            + f"flow f{n}(x: Int) -> Int = x\npub flow main() -> Int = f0(1)\n")


def enum_ctors(n: int) -> str:
    return "type E { " + ", ".join(f"C{i}(Int)" for i in range(n)) + " }\npub flow main() -> Int = 1\n"


def type_params(n: int) -> str:
    params = ", ".join(f"T{i}" for i in range(n))
    return f"type P<{params}> {{ a: T0 }}\npub flow main() -> Int = 1\n"


DEEP: dict[str, Callable[[int], str]] = {
    "deep-type": deep_type, "deep-type-decl": deep_type_decl, "deep-fn-type": deep_fn_type,
    "deep-parens": deep_parens, "deep-lists": deep_lists, "deep-records": deep_records,
    "deep-unary-minus": deep_unary_minus, "deep-not": deep_not, "deep-return": deep_return,
    "deep-lambda": deep_lambda, "deep-if": deep_if, "else-if-chain": else_if_chain, "deep-match": deep_match,
    "deep-blocks": deep_blocks, "deep-pattern": deep_pattern, "deep-interpolation": deep_interpolation,
    "member-chain": member_chain, "call-chain": call_chain, "try-chain": try_chain,
    "add-chain": add_chain, "mixed-chain": mixed_chain, "and-chain": and_chain, "concat-chain": concat_chain,
}

FLAT: dict[str, Callable[[int], str]] = {
    "match-arms": match_arms, "text-arms": text_arms, "enum-arms": enum_arms, "or-pattern": or_pattern,
    "record-fields": record_fields, "record-pattern": record_pattern,
    "record-literal-pattern": record_literal_pattern, "list-elements": list_elements,
    "tuple-elements": tuple_elements, "call-arguments": call_arguments, "lets": lets, "guards": guards,
    "functions": functions, "call-graph": call_graph, "enum-ctors": enum_ctors, "type-params": type_params,
}

SHAPES: dict[str, Callable[[int], str]] = {**DEEP, **FLAT}
