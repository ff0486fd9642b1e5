"""The Python Amelia's protocol models, AgenticMessage and DriverUsage (keys
in this order, absent values None): the worker's models, and the host's
(HostAgenticMessage, HostDriverUsage), whose usage has five context fields
more; and the persistent worker's WorkerRequest and ResponseFrame (serve
mode).

Shared by gen_golden.py and check_lines.py.
"""

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel


class AgenticMessageType(StrEnum):
    THINKING = "thinking"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    RESULT = "result"
    USAGE = "usage"


class DriverUsage(BaseModel):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None
    cost_usd: float | None = None
    duration_ms: int | None = None
    num_turns: int | None = None
    model: str | None = None


class AgenticMessage(BaseModel):
    type: AgenticMessageType
    content: str | None = None
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_output: str | None = None
    tool_call_id: str | None = None
    session_id: str | None = None
    is_error: bool = False
    model: str | None = None
    usage: DriverUsage | None = None


class HostDriverUsage(DriverUsage):
    context_tokens: int | None = None
    context_window_tokens: int | None = None
    context_utilization: float | None = None
    context_warning_threshold: float | None = None
    context_window_warning: bool | None = None


class HostAgenticMessage(AgenticMessage):
    usage: HostDriverUsage | None = None


class WorkerRequest(BaseModel):
    mode: Literal["agentic", "generate"]
    prompt: str
    model: str
    cwd: str | None = None
    instructions: str | None = None
    schema_path: str | None = None


class ResponseFrame(BaseModel):
    frame: Literal["msg", "done", "error"]
    msg: str | None = None
    error: str | None = None
