"""The ground floor: the value contract that the compiler (`flowc`), the sandbox child (`sandbox`)
and the trusted host (`flowrt`) share.

- `values`, `bigint`: Flow's runtime values and the Int's text conversions;
- `canonical`: the one canonical JSON writer and its exact readers (the hash chain, the channel
  and the ABI all write through it, so they agree byte for byte);
- `codec`: the type-directed encoder/decoder of values by type term (the ABI);
- `framing`: the host/child channel's frame format and pipe I/O, which both sides speak;
- `policy`, `names`: what the sandbox allows, the names generated code may use, and the child
  process's limits, as data.

This package imports nothing of `flowc`, `sandbox` or `flowrt` (an import-linter contract in
pyproject.toml, run by tests/test_import_directions.py), and only the standard library and
`orjson`: the child loads all of it.
"""
