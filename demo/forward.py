#!/usr/bin/env python3
"""Forwards 127.0.0.1:PORT to HOST:TARGET_PORT, for `make demo`.

The local cluster's node agent has no streaming API, so `kubectl port-forward`
cannot reach its Pods; its Services' ClusterIPs are addresses on this host's
loopback, though, so a plain TCP forwarder gives MCP clients the address they
expect, http://127.0.0.1:PORT/mcp (a loopback Host, which the frontend accepts).

    python3 demo/forward.py PORT HOST TARGET_PORT
"""
import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def handle(client_reader, client_writer, host: str, port: int) -> None:
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
    except OSError as err:
        print(f"forward: cannot reach {host}:{port}: {err}", file=sys.stderr, flush=True)
        client_writer.close()
        return
    await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))
    for writer in (upstream_writer, client_writer):
        writer.close()


async def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    listen_port, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, host, port), "127.0.0.1", listen_port
    )
    print(f"forward: 127.0.0.1:{listen_port} -> {host}:{port}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
