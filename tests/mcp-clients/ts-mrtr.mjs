// Drives the TypeScript client 2.x (protocol 2026-07-28) through a tool that
// asks on a plain tools/call: the SDK's own MRTR driver gets the server's
// `input_required`, calls this script's elicitation/sampling/roots handlers,
// and retries with the answers and the echoed requestState. Usage:
//   node ts-mrtr.mjs URL TOOL 'JSON-ARGUMENTS'
// $MCP_TOKEN is the bearer token. Each time a handler is asked it prints
// {"asked": METHOD, "params": …} on stdout and, when $MCP_GO_FILE is set,
// waits until that file exists before it answers (so a test can kill and
// restart the server in between). Answers: an elicitation accepts
// $MCP_ELICIT_CONTENT (JSON, default {}) — a URL-mode one just accepts
// (with $MCP_ELICIT_URL set the client declares URL mode beside forms) —
// sampling says "Paris", roots are one. Prints {"result": CallToolResult}
// or {"error": …} last.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { existsSync } from "node:fs";

const [url, tool, args] = process.argv.slice(2);
const auth = process.env.MCP_TOKEN ? { Authorization: `Bearer ${process.env.MCP_TOKEN}` } : {};
const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");

async function asked(method, params) {
  print({ asked: method, params });
  const go = process.env.MCP_GO_FILE;
  while (go && !existsSync(go)) await new Promise((resolve) => setTimeout(resolve, 100));
}

const client = new Client(
  { name: "mining-operator-tests-mrtr", version: "1.0.0" },
  {
    capabilities: {
      elicitation: process.env.MCP_ELICIT_URL ? { form: {}, url: {} } : {},
      sampling: {},
      roots: {},
    },
    versionNegotiation: { mode: { pin: "2026-07-28" } },
  },
);
client.setRequestHandler("elicitation/create", async (request) => {
  await asked("elicitation/create", request.params);
  if (request.params.mode === "url") return { action: "accept" };
  return { action: "accept", content: JSON.parse(process.env.MCP_ELICIT_CONTENT || "{}") };
});
client.setRequestHandler("sampling/createMessage", async (request) => {
  await asked("sampling/createMessage", request.params);
  return { role: "assistant", content: { type: "text", text: "Paris" }, model: "test-model" };
});
client.setRequestHandler("roots/list", async (request) => {
  await asked("roots/list", request.params);
  return { roots: [{ uri: "file:///work", name: "work" }] };
});
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } }));
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args || "{}") }, { timeout: 240000 });
  print({ era: client.getProtocolEra(), result });
} catch (err) {
  print({ error: String(err?.message ?? err), code: err?.code });
}
process.exit(0);
