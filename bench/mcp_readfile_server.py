"""An MCP stdio server with one `read_file` tool, the benchmark's point of comparison.

Usage: mcp_readfile_server.py WORKSPACE [PORT]. `read_file(path)` reads a file inside WORKSPACE
and returns its lines numbered the way callgate's ReadFile numbers them (`%6d\\t<line>`). Over
stdio, or with PORT over streamable HTTP on 127.0.0.1:PORT/mcp (the transport a remote agent
would use instead of callgate's gRPC).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer


def read_numbered(root: Path, path: str) -> str:
    """The file at `path` inside `root`, its lines numbered; refuses paths outside `root`."""
    # Resolved through symlinks, then held to the workspace, as callgate does.
    target = Path(os.path.realpath(root / path))
    if not target.is_relative_to(root):
        raise ValueError(f"{path} is outside the workspace")
    text = target.read_text(encoding="utf-8")
    return "\n".join(f"{number:6d}\t{line}" for number, line in enumerate(text.splitlines(), 1))


def build_server(workspace: Path, *, quiet: bool = False) -> MCPServer:
    root = workspace.resolve()
    # Quiet over HTTP: uvicorn would otherwise log a line per request.
    server = MCPServer("bench-readfile", log_level="WARNING" if quiet else "INFO")

    # Text only, as callgate answers: auto-detection would also send the text a second time
    # as structured content, which would make MCP look slower than it needs to be.
    @server.tool(
        description="Read a text file in the workspace, lines numbered.", structured_output=False
    )
    async def read_file(path: str) -> str:
        # Inline, as callgate reads small files: a thread hand-off costs more than a 4 KiB read.
        return read_numbered(root, path)

    return server


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: mcp_readfile_server.py WORKSPACE [PORT]")
    if len(sys.argv) == 2:
        build_server(Path(sys.argv[1])).run("stdio")
    else:
        server = build_server(Path(sys.argv[1]), quiet=True)
        # The SDK's defaults for streamable HTTP (a session, SSE answers), loopback only.
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))


if __name__ == "__main__":
    main()
