"""Judges JSON Schemas by their dialect's meta-schema, with Python's jsonschema.

Usage: check_schemas.py < CASES.json

CASES is a list of {"dialect": "draft-07" | null, "schema": ...}; a null
dialect means draft 2020-12. Prints a JSON list with, for each case, null
when `check_schema` accepts the schema, or the reason it gives.
"""

import json
import sys

import jsonschema

VALIDATORS = {
    None: jsonschema.Draft202012Validator,
    "draft-07": jsonschema.Draft7Validator,
}


def verdict(case):
    try:
        VALIDATORS[case["dialect"]].check_schema(case["schema"])
        return None
    except jsonschema.SchemaError as error:
        return error.message


if __name__ == "__main__":
    json.dump([verdict(case) for case in json.load(sys.stdin)], sys.stdout)
