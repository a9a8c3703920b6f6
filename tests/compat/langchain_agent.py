"""A scripted langchain agent on langchain-mcp-adapters' defaults (a new MCP session, hence a
new `callgate mcp` process, for every tool call), run by .venv-langchain's Python.

Argument: a JSON object {"command", "args", "env", "bound"}. It lists the tools, reads
notes.txt, then overwrites it, repeating the write while the answer says to make the same call
again (as a model following the tool's words would), and prints one JSON object per tool answer
on stdout: {"tool", "error", "text"}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from langchain_core.tools import ToolException
from langchain_mcp_adapters.client import MultiServerMCPClient


async def answer(tool: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        content = await tool.ainvoke(arguments)
    except ToolException as exc:
        return {"tool": tool.name, "error": True, "text": str(exc)}
    text = content if isinstance(content, str) else json.dumps(content)
    return {"tool": tool.name, "error": False, "text": text}


async def main(config: dict[str, Any]) -> None:
    client = MultiServerMCPClient(
        {
            "callgate": {
                "command": config["command"],
                "args": config["args"],
                "env": config["env"],
                "transport": "stdio",
            }
        }
    )
    tools = {tool.name: tool for tool in await client.get_tools()}
    print(json.dumps({"tool": "tools/list", "error": False, "text": sorted(tools)}), flush=True)
    print(json.dumps(await answer(tools["ReadFile"], {"path": "notes.txt"})), flush=True)
    deadline = time.monotonic() + config["bound"]
    while True:
        written = await answer(tools["WriteFile"], {"path": "notes.txt", "content": "new\n"})
        print(json.dumps(written), flush=True)
        if "Make exactly the same call again" not in written["text"]:
            return
        if time.monotonic() > deadline:
            raise SystemExit("the write was still pending at the bound")
        await asyncio.sleep(0.5)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
