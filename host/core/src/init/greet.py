"""Greet someone by name: a first tool to run, read and change.

Rye runs it with the parameters as JSON on stdin; whatever JSON it prints
is the result's data. After changing it, sign it again with
`rye sign tool hello/greet`.
"""

__version__ = "1.0.0"
__tool_type__ = "python"
__executor_id__ = "rye/core/runtimes/python/script"
__category__ = "hello"

CONFIG_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Who to greet"},
    },
}

import json
import sys

if __name__ == "__main__":
    params = json.load(sys.stdin)
    name = params.get("name") or "world"
    print(json.dumps({"greeting": f"Hello, {name}!"}))
