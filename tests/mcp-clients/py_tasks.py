"""Drives the Python SDK (`mcp` 1.x) task client (protocol 2025-11-25,
`session.experimental`) against the frontend, for the cluster tests. Usage:
    python3 py_tasks.py URL init
    python3 py_tasks.py URL start 'JSON-ARGUMENTS'   call_tool_as_task, print the task
    python3 py_tasks.py URL run 'JSON-ARGUMENTS'     call_tool_as_task, poll_task, get_task_result
    python3 py_tasks.py URL get|result|cancel TASK_ID
    python3 py_tasks.py URL list [CURSOR]
The bearer token comes from $MCP_TOKEN; $MCP_TIMEOUT_SECONDS bounds each
request (default 120). Prints one JSON document on stdout:
{task} | {statuses, result} | {result} | {tasks, nextCursor} | {error: {code, message}}.
"""
import asyncio
import json
import os
import sys
import warnings
from datetime import timedelta

from mcp import ClientSession, McpError
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import CallToolResult

# mcp 1.x marks the 2025-11-25 task API deprecated; it is the API under test.
warnings.filterwarnings("ignore", category=DeprecationWarning)


def dump(model) -> dict:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(url: str, command: str, arg: str | None) -> dict:
    token = os.environ.get("MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else None
    timeout = timedelta(seconds=float(os.environ.get("MCP_TIMEOUT_SECONDS", "120")))
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write, read_timeout_seconds=timeout) as session:
            initialized = await session.initialize()
            tasks = session.experimental
            if command == "init":
                return {
                    "capabilities": dump(initialized.capabilities),
                    "protocolVersion": initialized.protocolVersion,
                    "tools": [dump(t) for t in (await session.list_tools()).tools],
                }
            if command == "start":
                created = await tasks.call_tool_as_task(os.environ.get("MCP_TOOL", "start_mining"), json.loads(arg or "{}"))
                return {"task": dump(created.task)}
            if command == "run":
                created = await tasks.call_tool_as_task(os.environ.get("MCP_TOOL", "start_mining"), json.loads(arg or "{}"))
                statuses = [dump(status) async for status in tasks.poll_task(created.task.taskId)]
                result = await tasks.get_task_result(created.task.taskId, CallToolResult)
                return {"task": dump(created.task), "statuses": statuses, "result": dump(result)}
            if command == "get":
                return {"task": dump(await tasks.get_task(arg))}
            if command == "result":
                return {"result": dump(await tasks.get_task_result(arg, CallToolResult))}
            if command == "list":
                return dump(await tasks.list_tasks(arg))
            if command == "cancel":
                return {"task": dump(await tasks.cancel_task(arg))}
            raise ValueError(f"unknown command {command}")


if __name__ == "__main__":
    url, command, *rest = sys.argv[1:]
    try:
        output = asyncio.run(main(url, command, rest[0] if rest else None))
    except BaseException as error:  # noqa: BLE001 - every failure is reported as data
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]
        code = error.error.code if isinstance(error, McpError) else None
        output = {"error": {"code": code, "message": f"{type(error).__name__}: {error}"}}
    print(json.dumps(output))
