"""Drives the official Python SDK 2.x client (`mcp.Client`) against the
frontend, for the cluster tests. Usage:
    python3 py2_client.py URL tools
    python3 py2_client.py URL call TOOL 'JSON-ARGUMENTS'
$MCP_MODE picks the protocol: `auto` (the default: `server/discover`, i.e.
2026-07-28, falling back to the initialize handshake) or `legacy`. The bearer
token comes from $MCP_TOKEN; with $MCP_PROGRESS=1 the call asks for progress
notifications; $MCP_TIMEOUT_SECONDS bounds each request (default 120). With
$MCP_ELICIT_CONTENT (JSON) the client declares elicitation and sampling and
answers what a tool asks — through the SDK's own MRTR driver on 2026-07-28:
an elicitation accepts that content, sampling says "Paris". Prints one JSON
document on stdout: {tools, protocolVersion} | {result, progress, asked,
protocolVersion} | {error: {message}}.
"""
import json
import os
from contextlib import asynccontextmanager

import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

from client_cli import run


@asynccontextmanager
async def transport(url: str):
    token = os.environ.get("MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=None) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


class Transport:
    """The SDK's `Transport` protocol: an async context manager of streams."""

    def __init__(self, url: str):
        self._url = url
        self._context = None

    async def __aenter__(self):
        self._context = transport(self._url)
        return await self._context.__aenter__()

    async def __aexit__(self, *exc):
        return await self._context.__aexit__(*exc)


async def main(url: str, command: str, tool: str | None, arguments: str | None) -> dict:
    timeout = float(os.environ.get("MCP_TIMEOUT_SECONDS", "120"))
    mode = os.environ.get("MCP_MODE", "auto")
    server = Transport(url) if os.environ.get("MCP_TOKEN") else url
    asked = []
    answers = {}
    elicit_content = os.environ.get("MCP_ELICIT_CONTENT")
    if elicit_content is not None:

        async def on_elicitation(context, params):
            asked.append({"asked": "elicitation/create", "params": params.model_dump(mode="json", by_alias=True, exclude_none=True)})
            return types.ElicitResult(action="accept", content=json.loads(elicit_content))

        async def on_sampling(context, params):
            asked.append({"asked": "sampling/createMessage"})
            return types.CreateMessageResult(
                role="assistant", content=types.TextContent(type="text", text="Paris"), model="test-model"
            )

        answers = {"elicitation_callback": on_elicitation, "sampling_callback": on_sampling}
    async with Client(server, mode=mode, read_timeout_seconds=timeout, **answers) as client:
        version = client.session.protocol_version
        tools = await client.list_tools()
        if command == "tools":
            return {
                "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.tools],
                "protocolVersion": version,
            }
        progress = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append({"progress": value, "total": total, "message": message})

        callback = on_progress if os.environ.get("MCP_PROGRESS") == "1" else None
        result = await client.call_tool(tool, json.loads(arguments or "{}"), progress_callback=callback)
        return {
            "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
            "progress": progress,
            "asked": asked,
            "protocolVersion": version,
        }


if __name__ == "__main__":
    run(main)
