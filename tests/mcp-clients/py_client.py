"""Drives the official Python SDK client (`mcp`) against the frontend, for the
cluster tests. Usage:
    python3 py_client.py URL tools
    python3 py_client.py URL call TOOL 'JSON-ARGUMENTS'
    python3 py_client.py URL read URI   (resources/read: prints the size and SHA-256 of the bytes)
The bearer token comes from $MCP_TOKEN; $MCP_HOST, when set, is sent as the
Host header (a Service's DNS name when the URL names its address); with $MCP_PROGRESS=1 the call asks for
progress notifications; $MCP_TIMEOUT_SECONDS bounds each request (default 120). Prints one JSON document on stdout:
{tools} | {result, progress} | {error: {message}}.
"""
import base64
import hashlib
import json
import os
from datetime import timedelta

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from client_cli import run


async def main(url: str, command: str, tool: str | None, arguments: str | None) -> dict:
    token = os.environ.get("MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if os.environ.get("MCP_HOST"):
        headers["Host"] = os.environ["MCP_HOST"]
    async with streamablehttp_client(url, headers=headers or None) as (read, write, _):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=float(os.environ.get("MCP_TIMEOUT_SECONDS", "120")))) as session:
            initialized = await session.initialize()
            # Listing first makes the SDK validate structuredContent against each outputSchema.
            tools = await session.list_tools()
            if command == "tools":
                return {
                    "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.tools],
                    "protocolVersion": initialized.protocolVersion,
                }
            if command == "read":
                from pydantic import AnyUrl

                read = await session.read_resource(AnyUrl(tool))
                contents = []
                for c in read.contents:
                    data = base64.b64decode(c.blob) if getattr(c, "blob", None) is not None else c.text.encode()
                    contents.append({"uri": str(c.uri), "mimeType": c.mimeType, "bytes": len(data),
                                     "sha256": hashlib.sha256(data).hexdigest()})
                return {"contents": contents}
            progress = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append({"progress": value, "total": total, "message": message})

            callback = on_progress if os.environ.get("MCP_PROGRESS") == "1" else None
            result = await session.call_tool(tool, json.loads(arguments or "{}"), progress_callback=callback)
            return {"result": result.model_dump(mode="json", by_alias=True, exclude_none=True), "progress": progress}


if __name__ == "__main__":
    run(main)
