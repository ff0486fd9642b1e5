#!/usr/bin/env python3
"""Regenerate pydantic.jsonl, the golden lines for package protocol.

The models below mirror the Python Amelia's AgenticMessage and DriverUsage.
Every line is produced by pydantic v2's model_dump_json(), so the Go package
can prove that it reads and writes the very same bytes. The Go tests do not
need Python; run this only to regenerate, from core/protocol/testdata:

    python3 gen_golden.py > pydantic.jsonl
    python3 gen_golden.py floats > floats.txt
    python3 gen_golden.py serve > serve.jsonl

floats.txt holds, per line, a float's Python repr and, after a tab, what
pydantic writes for it: boundaries of its layout and a fixed random sample.
serve.jsonl holds the serve mode's requests (WorkerRequest, without their
length prefix) and frames (ResponseFrame), one per line.

check_lines.py is the other direction: it reads lines written by the Go
package (see TestWriteCorpus in corpus_test.go) and checks that pydantic
reads every one and writes it back byte for byte.
"""

from typing import Any

import math
import random
import struct
import sys

import pydantic
from pydantic import BaseModel


from amelia_models import (AgenticMessage, AgenticMessageType, DriverUsage, HostAgenticMessage, HostDriverUsage,
                           ResponseFrame, WorkerRequest)


T = AgenticMessageType

# Floats that exercise pydantic's layout: fixed notation for decimal
# exponents -5..15, scientific (no zero padding, explicit "+") outside.
FLOATS = [
    0.003, 0.0, -0.0, 123.0, 1.0, -1.5, 0.1, 0.30000000000000004,
    1e-7, 1e-6, 0.00001, 0.000025, 0.00001234, 0.0001, 9.999999999999999e-06,
    1e15, 9999999999999998.0, 1e16, 1.2345678901234568e+16, 1e17, 1e21, 1e22,
    1.5e+300, 1.7976931348623157e+308, 5e-324, 2.2250738585072014e-308,
    123456.789, 0.5, 2.5e-05, 1e100, -1e-100, 12345678901234.5,
]

messages: list[BaseModel] = [
    # The reference example from the design discussion.
    AgenticMessage(type=T.TOOL_CALL, tool_name="read_file", tool_input={"path": "a.py"},
                   tool_call_id="call_1", model="m"),
    # Every message type.
    AgenticMessage(type=T.THINKING, content="Let me look at the repository layout first, then read the "
                   "failing test to understand what the expected behaviour is before touching any code.",
                   model="gpt-5", session_id="sess-0001"),
    AgenticMessage(type=T.TOOL_RESULT, tool_name="read_file", tool_output="print('hello')\n",
                   tool_call_id="call_1", model="m"),
    AgenticMessage(type=T.TOOL_RESULT, tool_name="execute", tool_output="exit status 1: no such file",
                   tool_call_id="call_2", is_error=True),
    AgenticMessage(type=T.RESULT, content="Done. The test passes now.", session_id="sess-0001", model="m"),
    AgenticMessage(type=T.USAGE),
    AgenticMessage(type=T.THINKING),
    AgenticMessage(type=T.RESULT, content="", is_error=True),
    # A usage line with all fields, and one with some.
    AgenticMessage(type=T.USAGE, model="claude-sonnet-4",
                   usage=DriverUsage(input_tokens=12345, output_tokens=678, cache_read_tokens=9000,
                                     cache_creation_tokens=1200, cost_usd=0.003, duration_ms=45678,
                                     num_turns=7, model="claude-sonnet-4")),
    AgenticMessage(type=T.USAGE, usage=DriverUsage(input_tokens=10, cost_usd=None)),
    AgenticMessage(type=T.USAGE, usage=DriverUsage()),
    # Large and negative ints (int64 bounds).
    AgenticMessage(type=T.USAGE, usage=DriverUsage(input_tokens=9223372036854775807,
                                                   output_tokens=-9223372036854775808,
                                                   cache_read_tokens=0, duration_ms=-1,
                                                   num_turns=4294967296)),
]
for f in FLOATS:
    messages.append(AgenticMessage(type=T.USAGE, usage=DriverUsage(cost_usd=f)))

# Strings: non-ASCII, quotes, backslashes, control characters, HTML
# characters, U+2028/U+2029 and DEL (the last three written raw).
STRINGS = [
    "café é",
    "中文字符 日本語 한국어",
    "emoji 😀🎉 and a flag 🇫🇷",
    'say "hi"',
    "back\\slash C:\\path\\to\\file",
    "ctl \x00 \x01 \x08 \x0c \n \r \t \x1f end",
    "<script>a && b</script> / </",
    "line\u2028sep\u2029para",
    "del \x7f and \x80 \x9f C1",
    "\ufeffBOM and \ufffd replacement",
    "mixed: \"q\" \\ \n é 中 😀 \u2028 \x7f",
]
for s in STRINGS:
    messages.append(AgenticMessage(type=T.THINKING, content=s))
messages.append(AgenticMessage(type=T.TOOL_RESULT, tool_name="grep", tool_output="\n".join(STRINGS),
                               tool_call_id="id \"quoted\" \\", session_id="s\u2028", model="é"))

# tool_input: nesting, arrays, numbers, bools, null, key order not sorted,
# strings needing escapes, big ints and floats.
messages += [
    AgenticMessage(type=T.TOOL_CALL, tool_name="write_file", tool_call_id="call_3",
                   tool_input={"path": "src/x.py", "content": "def f():\n\treturn \"x\" \\ 1\n"}),
    AgenticMessage(type=T.TOOL_CALL, tool_name="edit_file", tool_call_id="call_4",
                   tool_input={"zeta": 1, "alpha": 2, "mid": {"y": [1, 2.5, -3, True, False, None,
                                                                    {"k": "v"}, []], "x": {}},
                               "big": 123456789012345678901234567890, "neg": -0.0, "f": 1e-7,
                               "g": 1e16, "h": 0.1, "s": "é中😀\u2028\x7f<>&/", "n": None}),
    AgenticMessage(type=T.TOOL_CALL, tool_name="execute", tool_call_id="call_5", is_error=True,
                   tool_input={"command": ["bash", "-lc", "ls -la && echo \"done\""], "timeout": 30,
                               "env": {"B": "2", "A": "1"}}),
    AgenticMessage(type=T.TOOL_CALL, tool_name="write_todos", tool_input={}),
    AgenticMessage(type=T.TOOL_CALL, tool_name="glob",
                   tool_input={"deep": {"a": {"b": {"c": {"d": [[[[{"e": [None]}]]]]}}}}}),
]

# The Python host's usage, with its five context fields: all of them, some,
# none (all null: still written), and its floats and bools.
messages += [
    HostAgenticMessage(type=T.USAGE, model="m",
                       usage=HostDriverUsage(input_tokens=1200, output_tokens=80, cost_usd=0.0021,
                                             duration_ms=812, num_turns=2, model="m",
                                             context_tokens=96000, context_window_tokens=128000,
                                             context_utilization=0.75, context_warning_threshold=0.8,
                                             context_window_warning=False)),
    HostAgenticMessage(type=T.USAGE, usage=HostDriverUsage(context_tokens=5, context_window_warning=True)),
    HostAgenticMessage(type=T.USAGE, usage=HostDriverUsage()),
    HostAgenticMessage(type=T.USAGE, usage=HostDriverUsage(context_utilization=1e-7,
                                                           context_warning_threshold=1e16)),
]

# The deepest line pydantic reads back: its JSON parser allows 200 nested
# containers in all, the message object included.
deep: Any = 1
for i in range(198):
    deep = [deep] if i % 2 else {"k": deep}
messages.append(AgenticMessage(type=T.TOOL_CALL, tool_name="deep", tool_input={"x": deep}))


# The serve mode: requests, then frames carrying some of the lines above.
serve: list[BaseModel] = [
    WorkerRequest(mode="agentic", prompt="Fix the test.", model="gpt-4.1-mini", cwd="/workspace/repo"),
    WorkerRequest(mode="generate", prompt="Review:\n\"x\" \\ é 😀 \u2028 \x7f \x01", model="m",
                  schema_path="amelia.agents.schemas.evaluator:EvaluationOutput"),
    WorkerRequest(mode="agentic", prompt="", model="", cwd="/w", instructions="Be brief.\n",
                  schema_path="/tmp/s.json"),
    WorkerRequest(mode="generate", prompt="p", model="m"),
]
serve += [ResponseFrame(frame="msg", msg=m.model_dump_json()) for m in messages[:12] + messages[-6:-1]]
serve += [
    ResponseFrame(frame="msg", msg="".join(STRINGS)),
    ResponseFrame(frame="error", error="llm: 400 Bad Request: \"context\" too long\n\u2028"),
    ResponseFrame(frame="error", error=""),
    ResponseFrame(frame="done"),
]


class Floats(BaseModel):
    v: list[float]


def float_samples() -> list[float]:
    rnd = random.Random(20240601)
    vals = list(FLOATS)
    # Powers of ten and their neighbours, across the whole range.
    for e in range(-324, 309):
        v = float(f"1e{e}")
        vals += [v, math.nextafter(v, math.inf), math.nextafter(v, 0.0), 9.5 * v]
    # Around the switch between fixed and scientific notation.
    for e in (-7, -6, -5, -4, 14, 15, 16, 17):
        for _ in range(40):
            d = rnd.randint(1, 17)
            vals.append(rnd.randint(10 ** (d - 1), 10**d - 1) / 10 ** (d - 1) * 10.0**e)
    # Integers around 2**53.
    for k in (52, 53, 54):
        vals += [2.0**k - 1, 2.0**k, 2.0**k + 2]
    # Random bit patterns and random decimals.
    for _ in range(500):
        x = struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0]
        if math.isfinite(x):
            vals.append(x)
        d = rnd.randint(1, 17)
        vals.append(float(f"{rnd.randint(10 ** (d - 1), 10**d - 1)}e{rnd.randint(-30, 30)}"))
    return vals


def main() -> None:
    assert pydantic.VERSION.startswith("2."), pydantic.VERSION
    if sys.argv[1:] == ["floats"]:
        vals = float_samples()
        out = Floats(v=vals).model_dump_json()
        outs = out[len('{"v":['):-len("]}")].split(",")
        assert len(outs) == len(vals)
        for v, o in zip(vals, outs):
            print(f"{v!r}\t{o}")
        return
    if sys.argv[1:] == ["serve"]:
        for m in serve:
            line = m.model_dump_json()
            assert type(m).model_validate_json(line) == m, line
            print(line)
        return
    for m in messages:
        line = m.model_dump_json()
        # Every golden line must read back to the same model.
        assert type(m).model_validate_json(line) == m, line
        print(line)


if __name__ == "__main__":
    main()
