"""Drives the FastMCP 4 client (`fastmcp.Client`, with `fastmcp_tasks` for the
2026-07-28 Tasks extension) against the frontend, for the cluster tests. Usage:
    python3 fastmcp_client.py URL tools
    python3 fastmcp_client.py URL call TOOL 'JSON-ARGUMENTS'   # tasks, if offered, polled transparently
    python3 fastmcp_client.py URL task TOOL 'JSON-ARGUMENTS'   # call_tool_task: the handle, driven by hand
The bearer token comes from $MCP_TOKEN; with $MCP_PROGRESS=1 the call asks for
progress notifications; $MCP_TIMEOUT_SECONDS bounds the call (default 120).
Prints one JSON document on stdout: {tools} | {result, progress} |
{task_id, first_status, result} | {error: {message}}.
"""
import json
import os

import fastmcp_tasks  # noqa: F401 - registers the client half of the Tasks extension
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from client_cli import run


def dump(value):
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(url: str, command: str, tool: str | None, arguments: str | None) -> dict:
    token = os.environ.get("MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else None
    timeout = float(os.environ.get("MCP_TIMEOUT_SECONDS", "120"))
    async with Client(StreamableHttpTransport(url, headers=headers), timeout=timeout) as client:
        tools = await client.list_tools()
        if command == "tools":
            return {"tools": [dump(t) for t in tools]}
        args = json.loads(arguments or "{}")
        if command == "task":
            task = await fastmcp_tasks.call_tool_task(client, tool, args, timeout=timeout)
            first = await task.status()
            result = await task.result()
            return {
                "task_id": task.task_id,
                "first_status": dump(first),
                "result": {"structuredContent": result.structured_content, "isError": result.is_error},
            }
        progress = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append({"progress": value, "total": total, "message": message})

        handler = on_progress if os.environ.get("MCP_PROGRESS") == "1" else None
        result = await client.call_tool_mcp(tool, args, progress_handler=handler)
        return {"result": dump(result), "progress": progress}


if __name__ == "__main__":
    run(main)
