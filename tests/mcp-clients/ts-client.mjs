// Drives the official TypeScript SDK client against the frontend, for the
// cluster tests. Usage:
//   node ts-client.mjs URL tools
//   node ts-client.mjs URL call TOOL 'JSON-ARGUMENTS'
//   node ts-client.mjs URL read URI        (resources/read: prints the size and SHA-256 of the bytes)
//   node ts-client.mjs URL resources       (resources/list and resources/templates/list)
// The bearer token comes from $MCP_TOKEN; with $MCP_PROGRESS=1 the call asks
// for progress notifications, and $MCP_META (a JSON object) goes in the
// call's _meta. Prints one JSON document on stdout:
// {tools} | {result, progress} | {error: {code, message}}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { createHash } from "node:crypto";

const [url, command, tool, json] = process.argv.slice(2);
const headers = process.env.MCP_TOKEN ? { Authorization: `Bearer ${process.env.MCP_TOKEN}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: "mining-operator-tests-ts", version: "1.0.0" });

function print(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

try {
  await client.connect(transport);
  // Listing first makes the SDK validate structuredContent against each outputSchema.
  const { tools } = await client.listTools();
  if (command === "tools") {
    print({ tools, protocolVersion: transport.protocolVersion ?? null });
  } else if (command === "call") {
    const progress = [];
    const options = { timeout: 1000 * Number(process.env.MCP_TIMEOUT_SECONDS ?? 120) };
    if (process.env.MCP_PROGRESS === "1") {
      options.onprogress = (p) => progress.push(p);
    }
    const params = { name: tool, arguments: JSON.parse(json ?? "{}") };
    if (process.env.MCP_META) {
      params._meta = JSON.parse(process.env.MCP_META);
    }
    const result = await client.callTool(params, undefined, options);
    print({ result, progress });
  } else if (command === "read") {
    const options = { timeout: 1000 * Number(process.env.MCP_TIMEOUT_SECONDS ?? 120) };
    const { contents } = await client.readResource({ uri: tool }, options);
    print({
      contents: contents.map((c) => {
        const bytes = c.blob !== undefined ? Buffer.from(c.blob, "base64") : Buffer.from(c.text ?? "", "utf8");
        return { uri: c.uri, mimeType: c.mimeType, bytes: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
      }),
    });
  } else if (command === "resources") {
    const { resources } = await client.listResources();
    const { resourceTemplates } = await client.listResourceTemplates();
    print({ resources, resourceTemplates });
  } else {
    throw new Error(`unknown command ${command}`);
  }
} catch (error) {
  print({ error: { code: error.code ?? null, message: String(error.message ?? error) } });
} finally {
  await client.close().catch(() => {});
}
