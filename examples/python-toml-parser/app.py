"""A parser component written in Python: tool metadata from TOML files.

Built with componentize-py against the same WIT contract as the Rust
components (`wit/rye-plugin@0.1.0`, world `parser`):

    componentize-py -d ../../wit/rye-plugin@0.1.0 -w parser componentize app -o toml.wasm

Install it as `.ai/parsers/toml/toml.wasm`: the system tool extractor maps
`.toml` tools to the parser `toml/toml`, which Rye does not ship.

A tool's metadata is the file's top-level table; `[tool]` or `[rye]`
tables, if present, are merged over it, so a project can keep Rye's keys
apart from others. Errors carry the line and column TOML reports.
"""

import json
import re
import tomllib

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.parsing import (
    ParseError_Structure,
    ParseError_Syntax,
    ParseError_Unsupported,
    ParseInput,
    Parsed,
)
from wit_world.imports.types import (
    Diagnostic,
    ItemKind,
    LocatedError,
    Position,
    Severity,
)

# tomllib's messages end in "(at line L, column C)".
_AT = re.compile(r"\(at line (\d+), column (\d+)\)$")


def _metadata(table):
    merged = {k: v for k, v in table.items() if not isinstance(v, dict) or k not in ("tool", "rye")}
    for section in ("tool", "rye"):
        if isinstance(table.get(section), dict):
            merged.update(table[section])
    return merged


class Parsing(exports.Parsing):
    def parse(self, input: ParseInput) -> Parsed:
        if input.kind != ItemKind.TOOL:
            raise Err(ParseError_Unsupported(f"this parser reads tools, not {input.kind.name.lower()} items"))
        try:
            table = tomllib.loads(input.content)
        except tomllib.TOMLDecodeError as error:
            message = str(error)
            at = _AT.search(message)
            position = Position(line=int(at.group(1)), column=int(at.group(2))) if at else None
            raise Err(ParseError_Syntax(LocatedError(message=_AT.sub("", message).strip(), at=position)))
        metadata = _metadata(table)
        diagnostics = []
        if "version" not in metadata and "__version__" not in metadata:
            diagnostics.append(
                Diagnostic(
                    severity=Severity.WARNING,
                    rule="toml/no-version",
                    message=f"{input.file_name} declares no version",
                    at=None,
                )
            )
        # TOML dates and times are not JSON; they are kept as their text.
        return Parsed(document=json.dumps(metadata, default=str), diagnostics=diagnostics)
