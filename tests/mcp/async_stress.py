"""Many async `execute` calls at once over one streamable HTTP session.

usage: async_stress.py URL PROJECT_DIR CALLS
Starts CALLS async executions of rye/bash/bash (each echoing its own
number) all at once; every reply must be an async start naming a thread.
Then waits, through the system tool rye/core/processes/list, until none is
running, and checks through rye/core/processes/status that each thread
completed with its own output. Prints a summary line; exits 1 on any
failure.
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
    failures = []
    async with streamablehttp_client(URL, headers=headers, timeout=120, sse_read_timeout=300) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def execute(item_id, parameters, run_async=False):
                arguments = {
                    "item_type": "tool",
                    "item_id": item_id,
                    "project_path": PROJECT,
                    "parameters": parameters,
                }
                if run_async:
                    arguments["async"] = True
                result = await session.call_tool("execute", arguments)
                return result.isError, json.loads(result.content[0].text)

            async def start(i):
                return i, await execute("rye/bash/bash", {"command": f"echo async-{i}"}, True)

            started = time.monotonic()
            replies = await asyncio.gather(*[start(i) for i in range(CALLS)], return_exceptions=True)
            returned = time.monotonic() - started
            threads = {}
            for reply in replies:
                if isinstance(reply, BaseException):
                    failures.append(f"a start raised {reply!r}")
                    continue
                i, (is_error, body) = reply
                if is_error or body.get("async") is not True or body.get("state") != "running":
                    failures.append(f"start {i}: {body}")
                else:
                    threads[body["thread_id"]] = i
            if len(set(threads)) != len(threads):
                failures.append("two starts share a thread id")

            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                is_error, body = await execute("rye/core/processes/list", {"status": "running", "limit": 1000})
                running = [t for t in body.get("data", []) if t["thread_id"] in threads]
                if is_error:
                    failures.append(f"list: {body}")
                    break
                if not running:
                    break
                await asyncio.sleep(0.5)
            else:
                failures.append("threads still running after 300 s")
            finished = time.monotonic() - started

            semaphore = asyncio.Semaphore(16)

            async def check(thread_id, i):
                async with semaphore:
                    is_error, body = await execute("rye/core/processes/status", {"run_id": thread_id})
                data = body.get("data", {})
                stdout = (data.get("result") or {}).get("data", {}).get("stdout")
                if is_error or data.get("status") != "completed" or stdout != f"async-{i}\n":
                    failures.append(f"thread {thread_id} (call {i}): {data.get('status')} {stdout!r}")

            await asyncio.gather(*[check(t, i) for t, i in threads.items()])

    print(json.dumps({
        "calls": CALLS,
        "threads": len(threads),
        "failures": len(failures),
        "all_returned_seconds": round(returned, 2),
        "all_finished_seconds": round(finished, 2),
    }))
    for failure in failures[:10]:
        print("FAIL", failure)
    sys.exit(1 if failures else 0)


asyncio.run(main())
