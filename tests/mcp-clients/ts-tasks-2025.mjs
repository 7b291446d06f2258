// Drives the TypeScript SDK 1.x task client (protocol 2025-11-25,
// `client.experimental.tasks`) against the frontend, for the cluster tests.
// Usage:
//   node ts-tasks-2025.mjs URL init
//   node ts-tasks-2025.mjs URL start 'JSON-ARGUMENTS'   create a task, print it
//   node ts-tasks-2025.mjs URL stream 'JSON-ARGUMENTS'  callToolStream to the end
//   node ts-tasks-2025.mjs URL run 'JSON-ARGUMENTS'     create, then tasks/result
//   node ts-tasks-2025.mjs URL get|result|cancel TASK_ID
//   node ts-tasks-2025.mjs URL list [CURSOR]
// $MCP_TOOL names the tool tasks are made of (default start_mining).
// $MCP_TOKEN is the bearer token; with $MCP_PROGRESS=1 the creating call
// passes a progress token and `run` collects the notifications. Prints one JSON
// document: {task} | {messages} | {result, progress} | {tasks, nextCursor}
// | {error: {code, message}}.
// $MCP_ANSWERS ({"elicitation": RESULT, "sampling": RESULT}) declares the
// elicitation and sampling capabilities and answers such requests the server
// sends (on a tasks/result stream) with them; `stream` then prints `asked`.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, CreateMessageRequestSchema, CreateTaskResultSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, command, arg] = process.argv.slice(2);
const headers = process.env.MCP_TOKEN ? { Authorization: `Bearer ${process.env.MCP_TOKEN}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const answers = process.env.MCP_ANSWERS ? JSON.parse(process.env.MCP_ANSWERS) : null;
const capabilities = answers ? { elicitation: { form: {} }, sampling: {} } : {};
const client = new Client({ name: "mining-operator-tests-ts-tasks", version: "1.0.0" }, { capabilities });
const asked = [];
if (answers) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push({ method: request.method, params: request.params });
    return answers.elicitation;
  });
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
    asked.push({ method: request.method, params: request.params });
    return answers.sampling;
  });
}
const timeout = 1000 * Number(process.env.MCP_TIMEOUT_SECONDS ?? 120);
const progress = [];
const options = { timeout };
if (process.env.MCP_PROGRESS === "1") {
  options.onprogress = (p) => progress.push(p);
}

function print(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

try {
  await client.connect(transport);
  // Lets the SDK learn each tool's taskSupport and output schema.
  const { tools } = await client.listTools();
  const tasks = client.experimental.tasks;
  if (command === "init") {
    print({ capabilities: client.getServerCapabilities(), tools, protocolVersion: transport.protocolVersion ?? null });
  } else if (command === "start") {
    const request = { method: "tools/call", params: { name: process.env.MCP_TOOL ?? "start_mining", arguments: JSON.parse(arg ?? "{}"), task: { ttl: 60000 } } };
    const created = await client.request(request, CreateTaskResultSchema, options);
    print({ task: created.task, progress });
  } else if (command === "stream") {
    const messages = [];
    const stream = tasks.callToolStream({ name: process.env.MCP_TOOL ?? "start_mining", arguments: JSON.parse(arg ?? "{}") }, CallToolResultSchema, { ...options, task: { ttl: 60000 } });
    for await (const message of stream) {
      messages.push(message.type === "error" ? { type: "error", error: { code: message.error.code, message: message.error.message } } : message);
    }
    print({ messages, asked });
  } else if (command === "get") {
    print({ task: await tasks.getTask(arg, options) });
  } else if (command === "result") {
    print({ result: await tasks.getTaskResult(arg, CallToolResultSchema, options) });
  } else if (command === "run") {
    // Create, then block in tasks/result: the SDK keeps the creating call's
    // progress handler for the task, so notifications on this stream reach it.
    const request = { method: "tools/call", params: { name: process.env.MCP_TOOL ?? "start_mining", arguments: JSON.parse(arg ?? "{}"), task: { ttl: 60000 } } };
    const created = await client.request(request, CreateTaskResultSchema, options);
    const result = await tasks.getTaskResult(created.task.taskId, CallToolResultSchema, options);
    print({ task: created.task, result, progress });
  } else if (command === "list") {
    print(await tasks.listTasks(arg, options));
  } else if (command === "cancel") {
    print({ task: await tasks.cancelTask(arg, options) });
  } else {
    throw new Error(`unknown command ${command}`);
  }
} catch (error) {
  print({ error: { code: error.code ?? null, message: String(error.message ?? error) } });
} finally {
  await client.close().catch(() => {});
}
