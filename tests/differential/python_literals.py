"""Reference for the python/ast parser: what CPython's own `ast` says.

For each file named on stdin (one path per line) prints one JSON line:
{"path": ..., "document": {...}, "unordered": [names]} or
{"path": ..., "error": "SyntaxError"}. `unordered` names the values that
hold sets: Python does not keep their order, so they compare order-free.

The document follows the parser's contract: every module-level assignment
with one plain-name target whose value `ast.literal_eval` accepts and that
has a JSON form, in first-assignment order with the last value, plus
`__docstring__` (the module docstring, stripped).
"""

import ast
import json
import math
import sys


class NoJsonForm(Exception):
    pass


def to_json(value):
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise NoJsonForm("lone surrogate")
        return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if -(2**63) <= value <= 2**64 - 1:
            return value
        raise NoJsonForm("int")
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise NoJsonForm("float")
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out[key(k)] = to_json(v)
        return out
    raise NoJsonForm(type(value).__name__)


def key(k):
    if isinstance(k, bool):
        return "true" if k else "false"
    if k is None:
        return "null"
    if isinstance(k, str):
        return to_json(k)
    if isinstance(k, int):
        return str(to_json(k))
    raise NoJsonForm("key")


def has_set(node):
    return any(isinstance(n, ast.Set) or (isinstance(n, ast.Call)) for n in ast.walk(node))


def document(source):
    tree = ast.parse(source)
    out = {}
    unordered = set()
    doc = ast.get_docstring(tree, clean=False)
    if doc is not None:
        out["__docstring__"] = doc.strip()
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if not isinstance(target, ast.Name):
            continue
        try:
            value = ast.literal_eval(node.value)
        except Exception:
            continue
        try:
            converted = to_json(value)
        except NoJsonForm:
            continue
        # Sets have no order in Python; the parser keeps source order and
        # drops duplicates, which only an order-free comparison can check.
        if has_set(node.value):
            unordered.add(target.id)
        else:
            unordered.discard(target.id)
        out[target.id] = converted
    return out, sorted(unordered)


for line in sys.stdin:
    path = line.rstrip("\n")
    try:
        with open(path, encoding="utf-8-sig") as f:
            source = f.read()
        doc, unordered = document(source)
        result = {"path": path, "document": doc, "unordered": unordered}
    except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        result = {"path": path, "error": type(e).__name__}
    print(json.dumps(result))
