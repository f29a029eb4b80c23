"""Drives `rye serve` with the Python `mcp` client package (a client no one
here wrote) and checks what an agent would see.

usage: client.py RYE_BINARY PROJECT_DIR      (spawns `rye serve`, stdio)
       client.py http://HOST:PORT/mcp PROJECT_DIR   (a running `rye serve --http`;
                                                     RYE_MCP_TOKEN is sent as a bearer token)
A spawned server inherits this environment (HOME, RYE_CACHE_DIR, ...).
Prints one line per check; exits 1 at the first failure.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

BINARY, PROJECT = sys.argv[1], sys.argv[2]


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        sys.exit(1)


def data(result):
    text = result.content[0].text
    parsed = json.loads(text)
    check("text content and structured content agree", parsed == result.structuredContent, text[:200])
    return parsed


async def main():
    if BINARY.startswith("http"):
        token = os.environ.get("RYE_MCP_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with streamablehttp_client(BINARY, headers=headers) as (read, write, _):
            await checks(read, write)
    else:
        params = StdioServerParameters(command=BINARY, args=["serve"], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            await checks(read, write)


async def checks(read, write):
    if True:
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check("initialize names the server", init.serverInfo.name == "rye", init.serverInfo)

            tools = (await session.list_tools()).tools
            names = [t.name for t in tools]
            check("exactly four tools", names == ["execute", "search", "load", "sign"], names)
            execute = tools[0]
            check(
                "execute's schema requires item_type, item_id, project_path",
                execute.inputSchema["required"] == ["item_type", "item_id", "project_path"],
                execute.inputSchema,
            )

            found = await session.call_tool(
                "search", {"scope": "tool", "query": "bash", "project_path": PROJECT}
            )
            ids = [r["id"] for r in data(found)["results"]]
            check("search finds rye/bash/bash", "rye/bash/bash" in ids, ids)

            loaded = data(
                await session.call_tool(
                    "load", {"item_type": "tool", "item_id": "rye/bash/bash", "project_path": PROJECT}
                )
            )
            check("load returns the content", "executor_id" in loaded["content"], loaded)
            check("load reports a verified signature", loaded["signature"]["status"] == "verified", loaded["signature"])

            copied = data(
                await session.call_tool(
                    "load",
                    {
                        "item_type": "knowledge",
                        "item_id": "rye/core/spaces",
                        "project_path": PROJECT,
                        "destination": "project",
                        "force": True,
                    },
                )
            )
            check("load copies into the project space", copied.get("copied_to") == "project", copied)
            check(
                "the copy is in the project",
                os.path.isfile(os.path.join(PROJECT, ".ai/knowledge/rye/core/spaces.md")),
                copied.get("destination_path"),
            )

            ran = await session.call_tool(
                "execute",
                {
                    "item_type": "tool",
                    "item_id": "rye/bash/bash",
                    "project_path": PROJECT,
                    "parameters": {"command": "echo '{\"sum\": 5}'"},
                },
            )
            check("execute succeeds", ran.isError is False, ran)
            check("execute returns the tool's data", data(ran)["data"] == {"sum": 5}, data(ran))

            dry = data(
                await session.call_tool(
                    "execute",
                    {"item_type": "tool", "item_id": "rye/bash/bash", "project_path": PROJECT, "dry_run": True},
                )
            )
            check("dry run validates without running", dry["status"] == "validation_passed", dry)

            failed = await session.call_tool(
                "execute",
                {
                    "item_type": "tool",
                    "item_id": "rye/bash/bash",
                    "project_path": PROJECT,
                    "parameters": {"command": "echo broken >&2; exit 3"},
                },
            )
            check("a failing tool is a result with isError", failed.isError is True, failed)
            check("its error says why", "broken" in data(failed)["error"], data(failed))

            try:
                await session.call_tool("execute", {"item_type": "tool", "project_path": PROJECT})
                check("missing arguments are refused", False, "no error")
            except McpError as e:
                check("missing arguments are invalid params", e.error.code == -32602, e.error)
                check("the error names the argument", "item_id" in e.error.message, e.error.message)

            signed = data(
                await session.call_tool(
                    "sign", {"item_type": "tool", "item_id": "demo/hello", "project_path": PROJECT}
                )
            )
            check("sign signs a project tool", signed["status"] == "signed", signed)
            hello = data(
                await session.call_tool(
                    "execute", {"item_type": "tool", "item_id": "demo/hello", "project_path": PROJECT}
                )
            )
            check("the signed tool runs", hello.get("data") == {"hello": "mcp"}, hello)


asyncio.run(main())
print("all checks passed")
