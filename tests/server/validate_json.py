#!/usr/bin/python3
"""The independent validator of tests/server/structured_output_test.mjs: Debian's python3-jsonschema
(Draft 2020-12) with strict checkers for the formats it leaves loose or unchecked.

stdin: {"cases": [{"schema": SCHEMA, "texts": ["reply", ...]}, ...]}
stdout: {"results": [[null | "why the text is not valid", ...], ...]} in the same order.

Each text must be one JSON text (RFC 8259: no NaN or Infinity, no repeated key in an object) that
validates against its schema. Formats: "date", "time" and "date-time" are RFC 3339's full-date,
full-time and date-time with real calendar and clock values (python3-jsonschema checks "time" and
"date-time" only with a package Debian lacks, and its "date" takes ISO 8601's basic form too);
"uuid" is the hyphenated 8-4-4-4-12 hex form; "email" is jsonschema's own check (one "@")
tightened to a local part and a domain without blanks.
"""
import datetime
import json
import re
import sys

import jsonschema
from jsonschema import Draft202012Validator

_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_TIME = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")

FORMATS = jsonschema.FormatChecker()


def _date(s):
    m = _DATE.match(s)
    if not m:
        return False
    datetime.date(int(m[1]), int(m[2]), int(m[3]))  # ValueError for 2023-02-30
    return True


def _time(s):
    m = _TIME.match(s)
    if not m:
        return False
    h, mi, sec = int(m[1]), int(m[2]), int(m[3])
    if h > 23 or mi > 59 or sec > 60:  # 60: a leap second
        return False
    if m[6] is not None and (int(m[6]) > 23 or int(m[7]) > 59):
        return False
    return True


def _date_time(s):
    parts = re.split(r"[Tt ]", s, maxsplit=1) if len(s) > 10 and s[10] in "Tt" else None
    return parts is not None and len(parts) == 2 and _date(parts[0]) and _time(parts[1])


for name, fn in (("date", _date), ("time", _time), ("date-time", _date_time),
                 ("uuid", lambda s: bool(_UUID.match(s))),
                 ("email", lambda s: bool(_EMAIL.match(s)))):
    FORMATS.checks(name, raises=(ValueError,))(
        lambda v, fn=fn: not isinstance(v, str) or fn(v))


def _no_repeat(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError(f"the key {k!r} is repeated")
        seen.add(k)
    return dict(pairs)


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def check(validator, text):
    try:
        value = json.loads(text, object_pairs_hook=_no_repeat, parse_constant=_no_constant)
    except ValueError as e:
        return f"not JSON: {e}"
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        return f"at /{'/'.join(map(str, e.absolute_path))}: {e.message}"
    return None


def main():
    request = json.load(sys.stdin)
    results = []
    for case in request["cases"]:
        schema = case["schema"]
        Draft202012Validator.check_schema(schema)
        validator = Draft202012Validator(schema, format_checker=FORMATS)
        results.append([check(validator, t) for t in case["texts"]])
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()
