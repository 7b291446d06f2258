"""The official Python SDK client (`mcp` 1.x) signing in the way MCP hosts do,
for the cluster tests: its `OAuthClientProvider` discovers the authorization
server from our 401 and Protected Resource Metadata, registers, and runs the
authorization code flow with PKCE; the "browser" is a scripted user agent
that follows the provider's redirects (its test interaction signs in as
$MCP_LOGIN and consents) up to the redirect URI. Usage:
    python3 py_oauth.py URL call TOOL 'JSON-ARGUMENTS'
Prints {result, token, requests} or {error: {message}}: `token` is the access
token's claims, `requests` every (method, URL, status) the SDK sent.
"""
import base64
import json
import os
from datetime import timedelta
from urllib.parse import parse_qs, urljoin, urlparse

import httpx
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from client_cli import run

REDIRECT = "http://127.0.0.1:9/callback"


class Memory:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def main(url: str, command: str, tool: str | None, arguments: str | None) -> dict:
    login = os.environ.get("MCP_LOGIN", "alice")
    callback: dict = {}

    async def browse(authorization_url: str) -> None:
        separator = "&" if "?" in authorization_url else "?"
        following = f"{authorization_url}{separator}login_hint={login}"
        async with httpx.AsyncClient(follow_redirects=False) as browser:
            for _ in range(20):
                response = await browser.get(following)
                location = response.headers.get("location")
                if not location:
                    raise RuntimeError(f"the provider answered {response.status_code} without a redirect")
                following = urljoin(following, location)
                if following.startswith(REDIRECT):
                    query = parse_qs(urlparse(following).query)
                    callback["code"] = query["code"][0]
                    callback["state"] = query.get("state", [None])[0]
                    return
        raise RuntimeError("too many redirects")

    async def come_back() -> tuple[str, str | None]:
        return callback["code"], callback["state"]

    storage = Memory()
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="mining-operator tests (Python SDK)",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browse,
        callback_handler=come_back,
    )
    requests: list = []

    async def record(response: httpx.Response) -> None:
        requests.append([response.request.method, str(response.request.url), response.status_code])

    def traced_client(**kwargs) -> httpx.AsyncClient:
        client = create_mcp_http_client(**kwargs)
        client.event_hooks["response"].append(record)
        return client

    async with streamablehttp_client(url, auth=auth, httpx_client_factory=traced_client) as (read, write, _):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=120)) as session:
            await session.initialize()
            if command != "call":
                raise ValueError(f"unknown command {command}")
            result = await session.call_tool(tool, json.loads(arguments or "{}"))
    token = storage.tokens.access_token if storage.tokens else None
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==")) if token else None
    return {"result": result.model_dump(mode="json", by_alias=True, exclude_none=True), "token": claims, "requests": requests}


if __name__ == "__main__":
    run(main)
