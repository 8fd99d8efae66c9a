"""A small MCP server written with the SDK, for tests/test_mcp_tools.py: tools with structured
output (a record, a wrapped primitive), one with text output only, one that fails.

Run as `python mcp_sample_server.py` (stdio) or `python mcp_sample_server.py --http PORT`
(streamable HTTP on 127.0.0.1). Each call appends its tool's name to $MCP_SAMPLE_LOG, when set,
so a test can see what the server was really asked."""

from __future__ import annotations

import os
import sys

from pydantic import BaseModel

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("sample")


class Quote(BaseModel):
    item: str
    quantity: int
    cents: int
    in_stock: bool


def _log(name: str) -> None:
    path = os.environ.get("MCP_SAMPLE_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(name + "\n")


@server.tool()
def quote(item: str, quantity: int) -> Quote:
    """What `quantity` of `item` costs."""
    _log("quote")
    return Quote(item=item, quantity=quantity, cents=250 * quantity, in_stock=quantity < 10)


@server.tool()
def shout(text: str, times: int | None = None) -> str:
    """`text` in capitals, `times` times (once by default)."""
    _log("shout")
    return " ".join([text.upper()] * (times or 1))


@server.tool(structured_output=False)
def tally(numbers: list[int]) -> str:
    """The sum of `numbers`, as text content only (no structured content)."""
    _log("tally")
    return str(sum(numbers))


@server.tool(name="Label-Of")
def label_of(type: str) -> str:
    """A tool and a parameter whose names Flow cannot spell as they are (import renames them)."""
    _log("Label-Of")
    return f"<{type}>"


@server.tool()
def refuse(reason: str) -> str:
    """Always fails, with `reason`."""
    _log("refuse")
    raise ToolError(f"refused: {reason}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
