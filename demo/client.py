"""The demo's MCP client: the official Python SDK mining one chain through the
installed frontend, printing progress as it arrives and the chain at the end.

    python3 demo/client.py URL [--host HOST] [--difficulty D] [--blocks N]
    python3 demo/client.py URL [--host HOST] --tool NAME --arguments JSON [--answer JSON]

The bearer token comes from $MCP_TOKEN. --host is sent as the Host header:
the Service's DNS name when URL names its ClusterIP, as a Pod would send it.
Exit status 0 only when the chain completed and every hash checks out (or,
with --tool, when the defined tool's run completed). When the tool asks
(status input_required), each question is printed and answered with
--answer (as a person at the keyboard would) through respond_tool_run.
"""
import argparse
import asyncio
import hashlib
import json
import os
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


def leading_zero_bits(digest: bytes) -> int:
    bits = 0
    for byte in digest:
        if byte == 0:
            bits += 8
            continue
        return bits + 8 - byte.bit_length()
    return bits


def check(chain: dict) -> list[str]:
    """Re-hashes every block on the client side: trust, but verify."""
    problems, prev = [], "GENESIS"
    for block in chain["blocks"]:
        digest = hashlib.sha256(f"{block['index']}:{prev}:{block['nonce']}".encode()).digest()
        if digest.hex().upper() != block["hash"].upper() or block["prev"] != prev:
            problems.append(f"block {block['index']} does not hash to what it says")
        elif leading_zero_bits(digest) < chain["difficulty"]:
            problems.append(f"block {block['index']} misses difficulty {chain['difficulty']}")
        prev = block["hash"]
    return problems


async def mine(args: argparse.Namespace) -> dict:
    headers = {}
    if os.environ.get("MCP_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['MCP_TOKEN']}"
    if args.host:
        headers["Host"] = args.host

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        print(f"  progress {done:.0f}/{total or '?':.0f}  {message or ''}", flush=True)

    async with streamablehttp_client(args.url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            info = await session.initialize()
            tools = [tool.name for tool in (await session.list_tools()).tools]
            print(f"connected to {info.serverInfo.name} {info.serverInfo.version} "
                  f"(protocol {info.protocolVersion}); tools: {', '.join(tools)}", flush=True)
            arguments = {"difficulty": args.difficulty, "blocks": args.blocks, "wait_seconds": 20}
            print(f"start_mining {json.dumps(arguments)}", flush=True)
            result = await session.call_tool("start_mining", arguments, progress_callback=on_progress)
            outcome = result.structuredContent or {}
            while outcome.get("status") == "running":
                print(f"  still running ({outcome.get('workflow_id')}); get_mining_result waits again", flush=True)
                result = await session.call_tool(
                    "get_mining_result",
                    {"workflow_id": outcome["workflow_id"], "wait_seconds": 20},
                    progress_callback=on_progress,
                )
                outcome = result.structuredContent or {}
            return outcome


async def call(args: argparse.Namespace) -> dict:
    """Calls a defined tool (an McpTool) and polls get_tool_result to its end."""
    headers = {"Authorization": f"Bearer {os.environ['MCP_TOKEN']}"} if os.environ.get("MCP_TOKEN") else {}
    if args.host:
        headers["Host"] = args.host
    async with streamablehttp_client(args.url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            # Every frontend replica lists a new McpTool within moments of its creation.
            for _ in range(60):
                if args.tool in [tool.name for tool in (await session.list_tools()).tools]:
                    break
                await asyncio.sleep(0.5)
            arguments = json.loads(args.arguments)
            print(f"{args.tool} {json.dumps(arguments)}", flush=True)
            outcome = (await session.call_tool(args.tool, arguments)).structuredContent or {}
            while outcome.get("status") in ("running", "input_required"):
                run = outcome["workflow_id"]
                if outcome["status"] == "input_required" and args.answer:
                    requests = outcome.get("input_requests", {})
                    for key, request in requests.items():
                        print(f"  the tool asks ({key}): {request['params'].get('message', request['method'])}", flush=True)
                    answer = json.loads(args.answer)
                    print(f"  answering {json.dumps(answer)}", flush=True)
                    result = await session.call_tool(
                        "respond_tool_run", {"workflow_id": run, "responses": {key: answer for key in requests}}
                    )
                elif outcome["status"] == "input_required":
                    return outcome
                else:
                    print(f"  still running ({run}); get_tool_result waits again", flush=True)
                    result = await session.call_tool("get_tool_result", {"workflow_id": run, "wait_seconds": 20})
                outcome = result.structuredContent or {}
            return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--host")
    parser.add_argument("--difficulty", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--tool", help="call this defined tool instead of mining")
    parser.add_argument("--arguments", default="{}", help="the tool's arguments, as JSON")
    parser.add_argument("--answer", help="the answer to each question the tool asks, as JSON")
    args = parser.parse_args()
    if args.tool:
        outcome = asyncio.run(call(args))
        print(json.dumps(outcome, indent=2))
        return 0 if outcome.get("status") == "completed" else 1
    outcome = asyncio.run(mine(args))
    if outcome.get("status") != "completed":
        print(f"the workflow did not complete: {json.dumps(outcome, indent=2)}", file=sys.stderr)
        return 1
    chain = outcome["result"]
    print(f"\nworkflow {outcome['workflow_id']}: {len(chain['blocks'])} blocks at difficulty {chain['difficulty']}")
    print(f"{'block':>5}  {'nonce':>10}  hash")
    for block in chain["blocks"]:
        print(f"{block['index']:>5}  {block['nonce']:>10}  {block['hash']}")
    problems = check(chain)
    for problem in problems:
        print(f"INVALID: {problem}", file=sys.stderr)
    print("every hash re-checked by the client" if not problems else "the chain does not check out")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
