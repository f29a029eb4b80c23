"""Cancels a sleeping `execute` over streamable HTTP and checks the tool's
process is killed.

usage: cancel.py URL PROJECT_DIR PIDFILE
Prints "killed" when the tool's process is gone within 5 s of the
cancellation; exits 1 otherwise.
"""

import asyncio
import os
import sys

from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client

URL, PROJECT, PIDFILE = sys.argv[1], sys.argv[2], sys.argv[3]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def main():
    token = os.environ.get("RYE_MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with streamablehttp_client(URL, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            call = asyncio.create_task(
                session.call_tool(
                    "execute",
                    {
                        "item_type": "tool",
                        "item_id": "rye/bash/bash",
                        "project_path": PROJECT,
                        "parameters": {"command": f"echo $$ > {PIDFILE}; exec sleep 30"},
                    },
                )
            )
            for _ in range(250):
                if os.path.exists(PIDFILE) and open(PIDFILE).read().strip():
                    break
                await asyncio.sleep(0.02)
            pid = int(open(PIDFILE).read())
            if not alive(pid):
                print("the tool was not running")
                sys.exit(1)
            # The call in flight is the session's latest request.
            request_id = session._request_id - 1
            await session.send_notification(
                types.ClientNotification(
                    types.CancelledNotification(
                        params=types.CancelledNotificationParams(requestId=request_id, reason="test")
                    )
                )
            )
            for _ in range(250):
                if not alive(pid):
                    print("killed")
                    call.cancel()
                    return
                await asyncio.sleep(0.02)
            print("the tool outlived its cancelled call")
            call.cancel()
            sys.exit(1)


asyncio.run(main())
