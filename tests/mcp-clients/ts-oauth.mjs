// The official TypeScript SDK client signing in the way MCP hosts do, for the
// cluster tests: no token configured, an OAuth client provider instead. On
// our 401 the SDK reads `resource_metadata`, fetches the Protected Resource
// Metadata, then the authorization server's metadata, registers itself
// (dynamic client registration), and sends the user to authorize with PKCE
// and `resource`; here the "browser" is scripted-browser.mjs (signs in as
// $MCP_LOGIN and consents) up to the redirect URI, whose code the SDK then
// exchanges for a token before calling the tool.
// Usage: node ts-oauth.mjs URL call TOOL 'JSON-ARGUMENTS'
// Prints {result, trace, token} or {error, trace}: `trace` is every HTTP
// exchange the SDK made ({method, url, status, www_authenticate}), `token`
// the access token's claims.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { authorize } from "./scripted-browser.mjs";

const [url, command, tool, json] = process.argv.slice(2);
const redirectUrl = "http://127.0.0.1:9/callback";
const trace = [];

async function tracedFetch(input, init) {
  const response = await fetch(input, init);
  trace.push({
    method: init?.method ?? "GET",
    url: String(input instanceof Request ? input.url : input),
    status: response.status,
    www_authenticate: response.headers.get("www-authenticate"),
  });
  return response;
}

class ScriptedProvider {
  code = undefined;
  authorizationUrl = undefined;
  get redirectUrl() {
    return redirectUrl;
  }
  get clientMetadata() {
    return {
      client_name: "mining-operator tests (TypeScript SDK)",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info) {
    this.client = info;
  }
  tokens() {
    return this.savedTokens;
  }
  saveTokens(tokens) {
    this.savedTokens = tokens;
  }
  async redirectToAuthorization(authorizationUrl) {
    this.authorizationUrl = authorizationUrl.href;
    const back = await authorize(authorizationUrl.href, (url) => url.href.startsWith(redirectUrl));
    this.code = back.searchParams.get("code");
  }
  saveCodeVerifier(verifier) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}

function print(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

const provider = new ScriptedProvider();
const connect = async () => {
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: tracedFetch });
  const client = new Client({ name: "mining-operator-tests-ts-oauth", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
};

let client;
try {
  try {
    ({ client } = await connect());
  } catch (error) {
    if (!(error instanceof UnauthorizedError) || !provider.code) throw error;
    // Back from the "browser": exchange the code, then connect again.
    const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: tracedFetch });
    await transport.finishAuth(provider.code);
    ({ client } = await connect());
  }
  if (command !== "call") throw new Error(`unknown command ${command}`);
  const options = { timeout: 1000 * Number(process.env.MCP_TIMEOUT_SECONDS ?? 120) };
  const result = await client.callTool({ name: tool, arguments: JSON.parse(json ?? "{}") }, undefined, options);
  const token = provider.savedTokens?.access_token;
  const claims = token ? JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()) : null;
  print({ result, trace, token: claims, authorization_url: provider.authorizationUrl });
} catch (error) {
  print({ error: { code: error.code ?? null, message: String(error.message ?? error) }, trace });
} finally {
  await client?.close().catch(() => {});
}
