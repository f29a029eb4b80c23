"""Many concurrent `execute` calls over one streamable HTTP session.

usage: stress.py URL PROJECT_DIR CALLS
Runs CALLS executions of rye/bash/bash (each echoing its own number) and,
among them, four of demo/spin (a tool whose parser component loops
forever), all at once. Every echo must come back with its own number and
every spin must fail alone. Prints a summary line; exits 1 on any failure.
"""

import asyncio
import json
import os
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

URL, PROJECT, CALLS = sys.argv[1], sys.argv[2], int(sys.argv[3])


async def main():
    token = os.environ.get("RYE_MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with streamablehttp_client(URL, headers=headers, timeout=120, sse_read_timeout=300) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def echo(i):
                result = await session.call_tool(
                    "execute",
                    {
                        "item_type": "tool",
                        "item_id": "rye/bash/bash",
                        "project_path": PROJECT,
                        "parameters": {"command": f"echo call-{i}"},
                    },
                )
                return ("echo", i, result)

            async def spin(i):
                result = await session.call_tool(
                    "execute", {"item_type": "tool", "item_id": "demo/spin", "project_path": PROJECT}
                )
                return ("spin", i, result)

            calls = [echo(i) for i in range(CALLS)]
            for k in range(4):
                calls.insert((k + 1) * CALLS // 5, spin(k))
            started = time.monotonic()
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            elapsed = time.monotonic() - started

    failures = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            failures.append(f"a call raised {outcome!r}")
            continue
        kind, i, result = outcome
        body = json.loads(result.content[0].text)
        if kind == "echo":
            if result.isError or body.get("data", {}).get("stdout") != f"call-{i}\n":
                failures.append(f"echo {i}: {body}")
        elif not result.isError or "deadline" not in body.get("error", ""):
            failures.append(f"spin {i} did not fail on its deadline: {body}")
    print(json.dumps({"calls": len(outcomes), "failures": len(failures), "seconds": round(elapsed, 2)}))
    for failure in failures[:10]:
        print("FAIL", failure)
    sys.exit(1 if failures else 0)


asyncio.run(main())
