"""An MCP server built with FastMCP, the Python SDK's server framework.

Tools: `add` (structured result), `echo` (text), `fail` (a tool error),
`sleep` (answers after a while), `crash` (the process exits mid-call),
`shout` (its description comes from NOTES_SHOUT_DESCRIPTION, so a test can
change a definition under a client).

Runs over stdio, or over streamable HTTP on 127.0.0.1:$NOTES_PORT when
given `http`. Prints NOTES_STARTED to stderr once up, with NOTES_GREETING,
and appends a line to the file $NOTES_START_LOG names, if it names one.
"""

import os
import sys
import time

from mcp.server.fastmcp import FastMCP

server = FastMCP("notes", host="127.0.0.1", port=int(os.environ.get("NOTES_PORT", "0") or 0))


@server.tool()
def add(a: int, b: int) -> dict:
    """Add two whole numbers."""
    return {"sum": a + b}


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason given."""
    raise ValueError(reason)


@server.tool()
def sleep(seconds: float) -> str:
    """Answer after a number of seconds."""
    time.sleep(seconds)
    return "awake"


@server.tool()
def crash() -> str:
    """Exit the server in the middle of the call."""
    sys.stderr.write("crashing now\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool(description=os.environ.get("NOTES_SHOUT_DESCRIPTION", "Say the text back in capitals."))
def shout(text: str) -> str:
    return text.upper()


@server.tool()
def environment(name: str) -> str:
    """The value of one environment variable of the server, or (unset)."""
    return os.environ.get(name, "(unset)")


if __name__ == "__main__":
    if os.environ.get("NOTES_START_LOG"):
        with open(os.environ["NOTES_START_LOG"], "a") as log:
            log.write("started %d\n" % os.getpid())
    sys.stderr.write("NOTES_STARTED %s\n" % os.environ.get("NOTES_GREETING", ""))
    sys.stderr.flush()
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run(transport="streamable-http")
    else:
        server.run()
