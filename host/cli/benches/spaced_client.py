"""Executes of a component tool through `rye serve`, timed by a client
that adds as little of its own as it can: one thread, blocking reads,
JSON-RPC written by hand on the server's stdin. Beside them, a raw
`bash -c cat` spawn timed the same way. Each back to back, then each
after 3 ms idle, alternating; and an MCP ping, the transport alone.

The `component_tools` bench times the same execute through the Rust
SDK's client, whose own runtime hands each answer across threads; after
an idle spell those hand-offs wake parked threads, and their cost lands
on the execute's side of the ratio only. This client shows how much of
a spaced execute is the server's.

    python3 host/cli/benches/spaced_client.py RYE_BINARY TOOL_PROBE_WASM [N]

TOOL_PROBE_WASM is the test component `tests/test-programs/tool-probe`
(built by any test run, under target/wasm/wasm32-wasip2/release/).

With `--wakes`, the server runs under `strace -f` instead, and the
script counts, over N executes 3 ms apart, those where the thread that
read the request woke another thread (a `futex` wake) before the answer
was written: a hand-off on the answer's path.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

PARAMETERS = {"do": "echo", "value": 1}
TOOL = """version: "1.0.0"
tool_type: wasm_component
executor_id: rye/core/runtimes/wasm/component
category: demo
description: Echoes its parameters
config:
  component: probe.wasm
"""


def median_ms(times):
    return sorted(times)[len(times) // 2] * 1e3


def wakes_before_answers(trace, ids):
    """Of the requests `ids` in an `strace -f` log, those whose read it
    shows whole, and of those the ones whose reading thread made a `futex`
    wake before their answer was written."""
    seen, woke, reader = set(), set(), {}
    request = re.compile(r'^(\d+) +read\(\d+, "\{\\"jsonrpc\\": \\"2.0\\", \\"id\\": (\d+),')
    answer = re.compile(r'^\d+ +write\(\d+, "\{\\"jsonrpc\\":\\"2.0\\",\\"id\\":(\d+),')
    for line in trace.splitlines():
        if m := request.match(line):
            if int(m.group(2)) in ids:
                reader = {"thread": m.group(1), "id": int(m.group(2))}
                seen.add(reader["id"])
        elif m := answer.match(line):
            reader = {}
        elif reader and line.startswith(reader["thread"] + " ") and "FUTEX_WAKE" in line:
            woke.add(reader["id"])
    return seen, woke


def main():
    wakes = "--wakes" in sys.argv[1:]
    positional = [a for a in sys.argv[1:] if a != "--wakes"]
    rye, probe = os.path.abspath(positional[0]), positional[1]
    count = int(positional[2]) if len(positional) > 2 else (50 if wakes else 1000)
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as project:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "RYE_CACHE_DIR": os.path.join(home, "cache"),
            "RYE_CACHE_KEY": os.path.join(home, "cache.key"),
            "RYE_LOG": "error",
        }
        tools = os.path.join(project, ".ai/tools/demo")
        os.makedirs(tools)
        shutil.copy(probe, os.path.join(tools, "probe.wasm"))
        with open(os.path.join(tools, "probe.yaml"), "w") as f:
            f.write(TOOL)
        for args in (["keys", "generate"], ["keys", "trust"], ["sign", "tool", "demo/probe"]):
            subprocess.run([rye, *args], cwd=project, env=env, check=True, capture_output=True)

        trace = os.path.join(home, "serve.strace")
        traced = ["strace", "-f", "-e", "trace=read,write,futex", "-o", trace] if wakes else []
        server = subprocess.Popen(
            [*traced, rye, "serve"], cwd=project, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE
        )

        def send(message):
            server.stdin.write((json.dumps(message) + "\n").encode())
            server.stdin.flush()

        def answer(id):
            while True:
                line = server.stdout.readline()
                if not line:
                    sys.exit("rye serve ended")
                message = json.loads(line)
                if message.get("id") == id:
                    return message

        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "spaced", "version": "1"}}})
        answer(0)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})

        calls = iter(range(1, 1 << 30))

        def execute():
            id = next(calls)
            started = time.perf_counter()
            send({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "execute", "arguments": {
                    "item_type": "tool", "item_id": "demo/probe",
                    "project_path": project, "parameters": PARAMETERS}}})
            reply = answer(id)
            took = time.perf_counter() - started
            text = reply["result"]["content"][0]["text"]
            if '"success"' not in text:
                sys.exit(f"the execute failed: {text}")
            return took

        def ping():
            id = next(calls)
            started = time.perf_counter()
            send({"jsonrpc": "2.0", "id": id, "method": "ping"})
            answer(id)
            return time.perf_counter() - started

        def spawn():
            given = json.dumps(PARAMETERS).encode()
            started = time.perf_counter()
            out = subprocess.run(["bash", "-c", "cat"], input=given, capture_output=True)
            took = time.perf_counter() - started
            if out.stdout != given:
                sys.exit("the spawn echoed something else")
            return took

        for _ in range(100):
            execute()
        if wakes:
            first = next(calls) + 1
            for _ in range(count):
                time.sleep(0.003)
                execute()
            server.stdin.close()
            server.wait()
            with open(trace) as f:
                seen, woke = wakes_before_answers(f.read(), range(first, first + count))
            print(f"{count} executes 3 ms apart, {len(seen)} of their reads traced whole: in "
                  f"{len(woke)} the thread that read the request woke another before the "
                  "answer was written")
            return
        pings = [ping() for _ in range(count)]
        executes = [execute() for _ in range(count)]
        spawns = [spawn() for _ in range(count // 2)]
        spaced_pings, spaced_executes, spaced_spawns = [], [], []
        for _ in range(count // 2):
            time.sleep(0.003)
            spaced_pings.append(ping())
            time.sleep(0.003)
            spaced_executes.append(execute())
            time.sleep(0.003)
            spaced_spawns.append(spawn())
        server.stdin.close()
        server.wait()

    print(f"MCP ping: back to back {median_ms(pings):.3f} ms, after 3 ms idle {median_ms(spaced_pings):.3f} ms")
    e, s = median_ms(executes), median_ms(spawns)
    se, ss = median_ms(spaced_executes), median_ms(spaced_spawns)
    print(f"back to back: execute {e:.3f} ms, spawn {s:.3f} ms, spawn / execute {s / e:.1f}x")
    print(f"after 3 ms idle: execute {se:.3f} ms, spawn {ss:.3f} ms, spawn / execute {ss / se:.1f}x")


if __name__ == "__main__":
    main()
