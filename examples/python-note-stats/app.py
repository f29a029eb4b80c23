"""A tool written in Python: what a project's notes hold.

A component of the `tool` world (`wit/rye-plugin@0.1.0`), built with
componentize-py:

    componentize-py -d ../../wit/rye-plugin@0.1.0 -w tool componentize app -o note-stats.wasm

Put `note-stats.wasm` beside `note-stats.yaml` under a space's
`.ai/tools/examples/` and sign the item (`rye sign tool
examples/note-stats`): the item grants read access to the project and
nothing else, so the tool can count notes but not change one, read a
variable or reach a host.

Parameters: `{"folder": ".ai/knowledge", "top": 5}`. The answer: how many
Markdown files the folder holds, their lines and words, the most used
headings' words, and the largest files.
"""

import json
import os
import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.running import (
    Call,
    ToolError_Denied,
    ToolError_InvalidParameters,
    ToolError_NotFound,
)

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")


def _parameters(call: Call) -> dict:
    try:
        parameters = json.loads(call.parameters or "{}")
    except ValueError as e:
        raise Err(ToolError_InvalidParameters(f"the parameters are not JSON: {e}"))
    if not isinstance(parameters, dict):
        raise Err(ToolError_InvalidParameters("the parameters are not an object"))
    return parameters


def _folder(call: Call, parameters: dict) -> str:
    if call.project_path is None:
        raise Err(ToolError_NotFound("the run has no project"))
    relative = parameters.get("folder", ".")
    if not isinstance(relative, str) or relative.startswith("/") or ".." in relative.split("/"):
        raise Err(ToolError_InvalidParameters(
            f"folder is {relative!r}; it is a folder of the project, as a relative path"))
    folder = os.path.normpath(os.path.join(call.project_path, relative))
    if not os.path.isdir(folder):
        raise Err(ToolError_NotFound(f"{relative} is not a folder of the project"))
    return folder


class Running(exports.Running):
    def run(self, call: Call) -> str:
        parameters = _parameters(call)
        top = parameters.get("top", 5)
        if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= 50:
            raise Err(ToolError_InvalidParameters("top is a whole number from 1 to 50"))
        folder = _folder(call, parameters)
        files, lines, words = [], 0, 0
        headings = {}
        try:
            for root, dirs, names in os.walk(folder):
                dirs.sort()
                for name in sorted(names):
                    if not name.endswith(".md"):
                        continue
                    path = os.path.join(root, name)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                    lines += text.count("\n")
                    words += len(text.split())
                    files.append((os.path.relpath(path, call.project_path), len(text)))
                    for line in text.splitlines():
                        if line.startswith("#"):
                            for word in _WORD.findall(line.lower()):
                                headings[word] = headings.get(word, 0) + 1
        except PermissionError as e:
            raise Err(ToolError_Denied(str(e)))
        largest = sorted(files, key=lambda f: (-f[1], f[0]))[:top]
        common = sorted(headings.items(), key=lambda h: (-h[1], h[0]))[:top]
        return json.dumps({
            "files": len(files),
            "lines": lines,
            "words": words,
            "heading_words": [{"word": w, "count": n} for w, n in common],
            "largest": [{"path": p, "bytes": n} for p, n in largest],
        })
