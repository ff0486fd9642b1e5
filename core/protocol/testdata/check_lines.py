#!/usr/bin/env python3
"""Check protocol lines with the Python Amelia's own models.

Reads JSON lines from the files named on the command line (or stdin) and
checks that pydantic v2 accepts every one as an AgenticMessage
(model_validate_json) and writes it back byte for byte (model_dump_json), so
the Python side reads exactly what the Go side wrote. The one exception is the
one package protocol documents: tool_input is kept as the JSON the model sent
(only compacted), so it is compared by value (1e1 and 10.0 are the same).
A line whose usage has the Python host's context keys is read with the host's
model (HostAgenticMessage), every other line with the worker's.
Exit status 1 and the first differences on failure.

    python3 check_lines.py worker-stdout.jsonl ...
"""

import json
import sys

import pydantic

from amelia_models import AgenticMessage, HostAgenticMessage


def split_tool_input(line: bytes) -> tuple[bytes, bytes, bytes]:
    """Split a line into what precedes tool_input's value, the value, and
    what follows. Fields before it are escaped strings and none after it is
    named tool_output, so the first and last matches are the keys."""
    i = line.find(b',"tool_input":') + len(b',"tool_input":')
    j = line.rfind(b',"tool_output":')
    return line[:i], line[i:j], line[j:]


def same(line: bytes, out: bytes) -> bool:
    if out == line:
        return True
    a, b = split_tool_input(line), split_tool_input(out)
    try:
        return a[0] == b[0] and a[2] == b[2] and json.loads(a[1]) == json.loads(b[1])
    except ValueError:  # out is a validation error, not a line
        return False


def host_usage(line: bytes) -> bool:
    try:
        usage = json.loads(line).get("usage")
    except (ValueError, AttributeError):
        return False
    return isinstance(usage, dict) and any(k.startswith("context_") for k in usage)


def check(lines) -> tuple[int, int]:
    n = bad = 0
    for n, line in enumerate(lines, 1):
        line = line.rstrip(b"\n")
        model = HostAgenticMessage if host_usage(line) else AgenticMessage
        try:
            out = model.model_validate_json(line).model_dump_json().encode()
        except pydantic.ValidationError as e:
            out = str(e).encode()
        if not same(line, out):
            bad += 1
            if bad <= 5:
                print(f"line {n}:\n  go:       {line[:300]!r}\n  pydantic: {out[:300]!r}")
    return n, bad


def main() -> None:
    assert pydantic.VERSION.startswith("2."), pydantic.VERSION
    total = failed = 0
    for path in sys.argv[1:] or ["-"]:
        f = sys.stdin.buffer if path == "-" else open(path, "rb")
        with f:
            n, bad = check(f)
        total, failed = total + n, failed + bad
    print(f"{total} lines, {failed} differ")
    sys.exit(1 if failed or not total else 0)


if __name__ == "__main__":
    main()
