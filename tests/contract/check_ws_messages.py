#!/usr/bin/python3
"""Checks real WebSocket messages against schema/ws.json.

Reads a JSON-lines file of {"from": "client"|"server", "message": {...}} (written by the pg test
"ws: every message ... matches schema/ws.json" from a real gpuexd), validates each message against
the schema of its op (client) or type (server), and fails when one does not match, has an op/type
the schema does not know, or when a message the schema defines never occurred.
Usage: check_ws_messages.py WS_SCHEMA_JSON MESSAGES_JSONL
"""
import json
import sys

import jsonschema


def main():
    schema_path, messages_path = sys.argv[1], sys.argv[2]
    with open(schema_path) as f:
        schema = json.load(f)
    defs = schema["$defs"]
    validator_cls = jsonschema.Draft202012Validator
    validator_cls.check_schema(schema)
    seen = {"client": set(), "server": set()}
    failures = []
    count = 0
    with open(messages_path) as f:
        for line_no, line in enumerate(f, 1):
            entry = json.loads(line)
            side, message = entry["from"], entry["message"]
            key = message.get("op") if side == "client" else message.get("type")
            if key not in defs[side]:
                failures.append("line %d: %s message with unknown %s %r" % (line_no, side,
                                                                             "op" if side == "client" else "type", key))
                continue
            seen[side].add(key)
            count += 1
            sub = dict(schema)
            sub["$ref"] = "#/$defs/%s/%s" % (side, key)
            errors = sorted(validator_cls(sub, format_checker=jsonschema.FormatChecker()).iter_errors(message),
                            key=str)
            for e in errors:
                failures.append("line %d: %s %s: %s at %s" % (line_no, side, key, e.message, list(e.absolute_path)))
    for side in ("client", "server"):
        for key in sorted(set(defs[side]) - seen[side]):
            failures.append("no %s message %r was exercised" % (side, key))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d messages valid; every client op and server type of %s exercised" % (count, schema_path))


if __name__ == "__main__":
    main()
