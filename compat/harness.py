#!/usr/bin/env python3
"""Check amelia-worker against the Python Amelia's worker protocol.

The Python host drives its worker in two ways: one-shot (`agentic` /
`generate`, one AgenticMessage JSON line per message) and `serve` (one
long-lived worker, length-prefixed WorkerRequests on stdin, newline-delimited
ResponseFrames on stdout). This harness drives amelia-worker both ways with
pydantic v2 models written from those wire rules (WorkerRequest,
ResponseFrame, AgenticMessage in core/protocol/testdata/amelia_models.py) and
checks every byte it gets back: each frame is what pydantic's
model_dump_json() writes for it, each message one pydantic reads and writes
back unchanged.

It is run by compat_test.go, which starts what it needs and passes it in the
environment (never a secret the worker should see):

    AMELIA_COMPAT_WORKER       the amelia-worker binary
    AMELIA_COMPAT_LLM_URL      the scripted model (internal/llmtest), root URL
    AMELIA_COMPAT_PROXY_URL    amelia's proxy, root URL, serving one run
    AMELIA_COMPAT_PROXY_TOKEN  that run's token
    AMELIA_COMPAT_UPSTREAM_KEY the run's upstream key (must never come back)
    AMELIA_COMPAT_GIT_HOST     the host of the run's repository
    AMELIA_COMPAT_GIT_TOKEN    the host's credential for it, which must
                               never come back
    AMELIA_COMPAT_CONTROL_URL  /held answers once the model holds a request,
                               /release lets it go

It prints one line per check and exits 1 if any failed.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "core" / "protocol" / "testdata"))

import pydantic  # noqa: E402

from amelia_models import AgenticMessage, ResponseFrame, WorkerRequest  # noqa: E402
from check_lines import same  # noqa: E402

E = os.environ
WORKER = E["AMELIA_COMPAT_WORKER"]
LLM = E["AMELIA_COMPAT_LLM_URL"]
PROXY = E["AMELIA_COMPAT_PROXY_URL"]
TOKEN = E["AMELIA_COMPAT_PROXY_TOKEN"]
UPSTREAM_KEY = E["AMELIA_COMPAT_UPSTREAM_KEY"]
GIT_HOST = E["AMELIA_COMPAT_GIT_HOST"]
GIT_TOKEN = E["AMELIA_COMPAT_GIT_TOKEN"]
CONTROL = E["AMELIA_COMPAT_CONTROL_URL"]

MAX_REQUEST_BYTES = 64 * 1024 * 1024
TIMEOUT = 300  # seconds: a bound on a stuck worker, not a wait for one

TMP = Path(tempfile.mkdtemp(prefix="amelia-compat-"))
# compat_test.go points TMPDIR at a test directory it removes; this is for
# a run by hand, and for a run that ends early.
atexit.register(shutil.rmtree, TMP, ignore_errors=True)

# A pydantic model of the Python Amelia's kind (its images hold such modules:
# amelia.agents.schemas), for both forms of generate's schema.
REVIEW_MODULE = '''
from typing import Literal

from pydantic import BaseModel


class Comment(BaseModel):
    text: str


class Review(BaseModel):
    verdict: Literal["approve", "reject"]
    comments: list[Comment]
'''
(TMP / "compat_review.py").write_text(REVIEW_MODULE)
sys.path.insert(0, str(TMP))
from compat_review import Review  # noqa: E402

REVIEW_SCHEMA = TMP / "review.json"
REVIEW_SCHEMA.write_text(json.dumps(Review.model_json_schema()))


# --- environments -----------------------------------------------------------

def env(**extra: str) -> dict[str, str]:
    """The worker's whole environment: nothing of this process's but PATH."""
    home = TMP / "home"
    home.mkdir(exist_ok=True)
    e = {"PATH": E["PATH"], "HOME": str(home), "GORACE": "atexit_sleep_ms=0", "PYTHONPATH": str(TMP)}
    e.update(extra)
    return e


def amelia_env(root: str = PROXY, **extra: str) -> dict[str, str]:
    """What amelia's host gives the worker."""
    return env(AMELIA_PROXY_URL=root, AMELIA_PROXY_TOKEN=TOKEN, **extra)


def python_env(base: str = PROXY + "/proxy/v1", **extra: str) -> dict[str, str]:
    """What the Python Amelia's Docker provider gives its worker."""
    return env(LLM_PROXY_URL=base, AMELIA_PROFILE="compat-profile", AMELIA_PROXY_TOKEN=TOKEN, **extra)


# --- the wire ---------------------------------------------------------------

def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def request(**fields: object) -> bytes:
    """A request as the Python driver's encode_request() writes it."""
    return frame(WorkerRequest(**fields).model_dump_json().encode())


@dataclass
class Command:
    """What serve answered to one request."""

    msgs: list[AgenticMessage] = field(default_factory=list)
    error: str | None = None

    def ending(self, is_error: bool = False) -> AgenticMessage:
        """Checks the command ended with a result (is_error as given) and
        its usage; returns the result."""
        types = [m.type.value for m in self.msgs]
        expect(types[-2:] == ["result", "usage"], f"ends with {types}, want result, usage")
        res = self.msgs[-2]
        expect(res.is_error == is_error, f"result is_error {res.is_error}: {res.content!r}")
        expect((self.error is not None) == is_error, f"error frame {self.error!r}")
        expect(self.msgs[-1].usage is not None, "a usage line without usage")
        return res


def check_message(line: bytes) -> AgenticMessage:
    """A protocol line pydantic reads, and writes back byte for byte."""
    m = AgenticMessage.model_validate_json(line)
    expect(same(line, m.model_dump_json().encode()), f"pydantic writes {line[:200]!r} differently")
    return m


def commands(stdout: bytes) -> list[Command]:
    """serve's stdout: only ResponseFrames, each exactly as pydantic writes
    it; per command msg frames, at most one error frame, then done."""
    if not stdout:
        return []
    expect(stdout.endswith(b"\n"), "stdout does not end with a newline")
    out: list[Command] = []
    cur = Command()
    for n, line in enumerate(stdout[:-1].split(b"\n"), 1):
        f = ResponseFrame.model_validate_json(line)
        expect(f.model_dump_json().encode() == line, f"frame {n} is not as pydantic writes it: {line[:200]!r}")
        if f.frame == "msg":
            expect(cur.error is None, f"frame {n}: a msg after the error frame")
            expect(f.msg is not None, f"frame {n}: a msg frame without msg")
            cur.msgs.append(check_message(f.msg.encode()))
        elif f.frame == "error":
            expect(cur.error is None and f.error is not None, f"frame {n}: a second error frame, or one without error")
            cur.error = f.error
        else:
            out.append(cur)
            cur = Command()
    expect(not cur.msgs and cur.error is None, "frames after the last done")
    return out


@dataclass
class Run:
    code: int
    stdout: bytes
    stderr: bytes


def worker(args: list[str], stdin: bytes = b"", e: dict[str, str] | None = None) -> Run:
    p = subprocess.run([WORKER, *args], input=stdin, env=e or amelia_env(), capture_output=True, timeout=TIMEOUT)
    return Run(p.returncode, p.stdout, p.stderr)


def serve(stdin: bytes, e: dict[str, str] | None = None) -> tuple[Run, list[Command]]:
    r = worker(["serve"], stdin, e)
    return r, commands(r.stdout)


def one_shot(mode: str, prompt: str, *args: str, e: dict[str, str] | None = None) -> tuple[Run, list[AgenticMessage]]:
    pf = TMP / f"prompt-{mode}.txt"
    pf.write_text(prompt)
    r = worker([mode, "--prompt-file", str(pf), "--model", "m", *args], b"", e)
    msgs = [check_message(line) for line in r.stdout.splitlines()]
    return r, msgs


# --- checks -----------------------------------------------------------------

class Failed(Exception):
    pass


def expect(ok: bool, why: str) -> None:
    if not ok:
        raise Failed(why)


CHECKS: list[tuple[str, Callable[[], None]]] = []


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS.append((fn.__name__, fn))
    return fn


@check
def serve_several_requests_on_one_worker() -> None:
    cwd = TMP / "work"
    cwd.mkdir()
    r, cmds = serve(
        request(mode="agentic", prompt="write-file", model="m", cwd=str(cwd), instructions="Be brief.")
        + request(mode="generate", prompt="hello", model="m")
        + request(mode="generate", prompt="review", model="m", schema_path=str(REVIEW_SCHEMA))
    )
    expect(r.code == 0, f"exit {r.code}: {r.stderr[-500:]!r}")
    expect(len(cmds) == 3, f"{len(cmds)} commands answered, want 3")
    expect([m.type.value for m in cmds[0].msgs] == ["thinking", "tool_call", "tool_result", "result", "usage"],
           f"agentic: {[m.type.value for m in cmds[0].msgs]}")
    expect(cmds[0].ending().content == "Done.", "agentic result")
    expect((cwd / "out.txt").read_text() == "written by the agent\n", "the agent's file")
    expect(cmds[1].ending().content == "echo: hello", f"generate: {cmds[1].msgs[-2].content!r}")
    review = Review.model_validate_json(cmds[2].ending().content)
    expect(review.verdict == "approve", f"review {review}")
    expect(cmds[2].msgs[-1].usage.input_tokens == 12, "usage of the schema'd call")


@check
def an_error_the_worker_survives() -> None:
    r, cmds = serve(request(mode="generate", prompt="fail", model="m") + request(mode="generate", prompt="after", model="m"))
    expect(r.code == 0, f"exit {r.code}")
    expect(len(cmds) == 2, f"{len(cmds)} commands")
    res = cmds[0].ending(is_error=True)
    expect("context too long" in (res.content or "") and "context too long" in cmds[0].error, f"error frame {cmds[0].error!r}")
    expect(cmds[1].ending().content == "echo: after", "the next request")


@check
def bad_requests_end_the_worker() -> None:
    good = request(mode="generate", prompt="first", model="m")
    unknown_mode = json.dumps({"mode": "serve", "prompt": "p", "model": "m"}).encode()
    try:
        WorkerRequest.model_validate_json(unknown_mode)
        raise Failed("the Python model takes mode serve")
    except pydantic.ValidationError:
        pass
    for name, bad in [
        ("truncated length prefix", good[:2]),
        ("truncated payload", good[:-3]),
        ("zero length", struct.pack(">I", 0)),
        ("oversized", struct.pack(">I", MAX_REQUEST_BYTES + 1) + b"{"),
        ("not JSON", frame(b"{\"mode\":")),
        ("unknown mode", frame(unknown_mode)),
        ("no prompt", frame(b'{"mode":"agentic","model":"m"}')),
    ]:
        r, cmds = serve(good + bad)
        expect(r.code == 1, f"{name}: exit {r.code}, want 1")
        expect(len(cmds) == 1 and cmds[0].ending().content == "echo: first", f"{name}: stdout holds more than the first answer")
        expect(b"request 2" in r.stderr, f"{name}: stderr {r.stderr[-300:]!r}")
        r, cmds = serve(bad)
        expect(r.code == 1 and r.stdout == b"", f"{name} alone: exit {r.code}, stdout {r.stdout[:100]!r}")
    r, cmds = serve(b"")
    expect(r.code == 0 and r.stdout == b"", f"no request at all: exit {r.code}")


@check
def eof_in_the_middle_of_a_command() -> None:
    p = subprocess.Popen([WORKER, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=amelia_env())
    try:
        p.stdin.write(request(mode="generate", prompt="hold", model="m"))
        p.stdin.flush()
        urllib.request.urlopen(CONTROL + "/held", timeout=TIMEOUT).close()  # the command is at the model now
        p.stdin.close()
        urllib.request.urlopen(urllib.request.Request(CONTROL + "/release", method="POST"), timeout=TIMEOUT).close()
        stdout = p.stdout.read()
        stderr = p.stderr.read()
        code = p.wait(timeout=TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
    expect(code == 0, f"exit {code}: {stderr[-300:]!r}")
    cmds = commands(stdout)
    expect(len(cmds) == 1 and cmds[0].ending().content == "released", f"stdout {stdout[:300]!r}")


@check
def generate_schema_as_a_file() -> None:
    r, msgs = one_shot("generate", "review", "--schema", str(REVIEW_SCHEMA))
    expect(r.code == 0, f"exit {r.code}: {r.stderr[-300:]!r}")
    Review.model_validate_json(msgs[-2].content)


@check
def generate_schema_as_module_class() -> None:
    r, msgs = one_shot("generate", "review", "--schema", "compat_review:Review")
    expect(r.code == 0, f"one-shot: exit {r.code}: {r.stderr[-300:]!r}")
    expect([m.type.value for m in msgs] == ["result", "usage"], "one-shot lines")
    Review.model_validate_json(msgs[0].content)
    r, cmds = serve(request(mode="generate", prompt="review", model="m", schema_path="compat_review:Review"))
    expect(r.code == 0 and len(cmds) == 1, f"serve: exit {r.code}")
    Review.model_validate_json(cmds[0].ending().content)
    # A module the sandbox cannot import: one line naming it.
    r, msgs = one_shot("generate", "review", "--schema", "no_such_module:Review")
    expect(r.code == 1 and msgs[-2].is_error, f"unimportable: exit {r.code}")
    expect("module no_such_module is not importable" in msgs[-2].content and "\n" not in msgs[-2].content,
           f"unimportable: {msgs[-2].content!r}")
    r, cmds = serve(request(mode="generate", prompt="review", model="m", schema_path="no_such_module:Review"))
    expect(r.code == 0 and "module no_such_module is not importable" in (cmds[0].error or ""), f"serve: {cmds[0].error!r}")


def headers_seen(e: dict[str, str], persistent: bool = False) -> dict:
    """What the model saw of the worker's identity, through generate."""
    if persistent:
        r, cmds = serve(request(mode="generate", prompt="headers", model="m"), e)
        expect(r.code == 0, f"serve: exit {r.code}: {r.stderr[-300:]!r}")
        content = cmds[0].ending().content
    else:
        r, msgs = one_shot("generate", "headers", e=e)
        expect(r.code == 0, f"exit {r.code}: {r.stderr[-300:]!r}")
        content = msgs[-2].content
    return json.loads(content)


@check
def header_forms_reach_the_model() -> None:
    cases = [
        ("python, a token", python_env(LLM + "/v1"),
         {"Authorization": f"Bearer {TOKEN}", "X-Amelia-Proxy-Token": TOKEN, "X-Amelia-Profile": "compat-profile"}),
        ("python, proxy-managed", env(LLM_PROXY_URL=LLM + "/v1"), {"Authorization": "Bearer proxy-managed"}),
        ("python, a key of its own", env(LLM_PROXY_URL=LLM + "/v1", OPENAI_API_KEY="sk-own"), {"Authorization": "Bearer sk-own"}),
        ("amelia", amelia_env(LLM), {"Authorization": f"Bearer {TOKEN}", "X-Amelia-Proxy-Token": TOKEN}),
    ]
    for name, e, want in cases:
        for persistent in (False, True):
            seen = headers_seen(e, persistent)
            got = {k: v for k, v in seen.items() if k != "x-amelia-headers"}
            expect(got == want, f"{name} (serve: {persistent}): the model saw {got}, want {want}")


@check
def header_forms_through_amelias_proxy() -> None:
    for name, e in [("python", python_env()), ("amelia", amelia_env())]:
        for persistent in (False, True):
            seen = headers_seen(e, persistent)
            expect(seen["Authorization"] == "Bearer <the upstream key>", f"{name}: the upstream got {seen['Authorization']!r}")
            expect(seen["x-amelia-headers"] is None, f"{name}: X-Amelia headers went upstream: {seen['x-amelia-headers']}")
            expect(UPSTREAM_KEY not in json.dumps(seen), f"{name}: the upstream key came back")


@check
def git_credential_in_both_environments() -> None:
    # git in the sandbox asks for the proxy's own credential (its git route):
    # the run's token, in both environments. The forge's token stays on the
    # host: asked for the run's repository host, the proxy refuses.
    proxy_host = PROXY.removeprefix("http://").split("/")[0]
    for name, e in [("amelia", amelia_env()), ("python", python_env())]:
        r = worker(["git-credential", "get"], f"protocol=http\nhost={proxy_host}\n\n".encode(), e)
        expect(r.code == 0 and f"password={TOKEN}\n".encode() in r.stdout, f"{name}: exit {r.code}: {r.stderr!r}")
        r = worker(["git-credential", "get"], f"protocol=https\nhost={GIT_HOST}\n\n".encode(), e)
        expect(r.code == 1 and b"403" in r.stderr and r.stdout == b"", f"{name}, the forge: exit {r.code}: {r.stderr!r}")
        expect(GIT_TOKEN.encode() not in r.stdout + r.stderr, f"{name}: the forge's token came back")
    # The Python helper's environment without a token: our proxy wants one.
    r = worker(["git-credential", "get"], f"protocol=http\nhost={proxy_host}\n\n".encode(),
               env(LLM_PROXY_URL=PROXY + "/proxy/v1", AMELIA_PROFILE="compat-profile"))
    expect(r.code == 1 and b"401" in r.stderr and r.stdout == b"", f"without a token: exit {r.code}: {r.stderr!r}")


def main() -> None:
    assert pydantic.VERSION.startswith("2."), pydantic.VERSION
    failed = 0
    for name, fn in CHECKS:
        try:
            fn()
            print(f"PASS {name}")
        except Failed as e:
            failed += 1
            print(f"FAIL {name}: {e}")
        except Exception:  # noqa: BLE001 - a crash is a failed check too
            failed += 1
            print(f"FAIL {name}:\n{traceback.format_exc()}")
    print(f"{len(CHECKS)} checks, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
