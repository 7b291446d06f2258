// Drives the TypeScript client 2.x with the Tasks extension package
// (`@modelcontextprotocol/ext-tasks`, protocol 2026-07-28) against the
// frontend, for the cluster tests. Usage:
//   node ts-tasks-2026.mjs URL init
//   node ts-tasks-2026.mjs URL run 'JSON-ARGUMENTS'    callTool, then settle()
//   node ts-tasks-2026.mjs URL sync 'JSON-ARGUMENTS'   plain callTool, tasks not declared
//   node ts-tasks-2026.mjs URL start 'JSON-ARGUMENTS'  callTool, print the handle, hand it off
//   node ts-tasks-2026.mjs URL get|settle|cancel TASK_ID
//   node ts-tasks-2026.mjs URL raw METHOD 'JSON-PARAMS' [no-tasks]
//   node ts-tasks-2026.mjs URL listen 'JSON-ARGUMENTS'  start a task, then the client's
//                                                    own listen() until it is told the end
// $MCP_TOOL names the tool tasks are made of (default start_mining).
// $MCP_TOKEN is the bearer token. Prints one JSON document on stdout.
// $MCP_ANSWERS ({"elicitation": RESULT, "sampling": RESULT}) makes the
// session answer a task's inputRequests (tasks/update) through ext-tasks'
// own onInputRequest; `run` then prints what it was asked as `asked`.
//
// ext-tasks sends 2026-07-28 task traffic through a host-owned `rawDispatch`
// (the SDK's own codecs predate it); ours is a plain Streamable HTTP POST
// with the headers 2026-07-28 requires (MCP-Protocol-Version, Mcp-Method,
// Mcp-Name).
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";

const PROTOCOL = "2026-07-28";
const TASKS = "io.modelcontextprotocol/tasks";
const [url, command, arg, extra, flag] = process.argv.slice(2);
const auth = process.env.MCP_TOKEN ? { Authorization: `Bearer ${process.env.MCP_TOKEN}` } : {};
const clientInfo = { name: "mining-operator-tests-ext-tasks", version: "1.0.0" };
const clientCapabilities = { extensions: { [TASKS]: {} } };

function print(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

/** One JSON-RPC exchange over HTTP; answers {status, message}. */
async function post(request, extraHeaders = {}, signal) {
  const method = request.method;
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": PROTOCOL,
    "mcp-method": method,
    ...auth,
  };
  // ext-tasks passes its own framing headers on follow-ups: one spelling each.
  for (const [key, value] of Object.entries(extraHeaders)) headers[key.toLowerCase()] = value;
  const name = request.params?.name ?? request.params?.taskId;
  if (!("mcp-name" in headers) && typeof name === "string" && (method === "tools/call" || method.startsWith("tasks/"))) {
    headers["mcp-name"] = name;
  }
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(request), signal });
  const text = await response.text();
  if (process.env.MCP_DEBUG) process.stderr.write(`>> ${JSON.stringify(request)}\n<< ${response.status} ${text}\n`);
  let message;
  if ((response.headers.get("content-type") ?? "").includes("text/event-stream")) {
    for (const event of text.split(/\r?\n\r?\n/)) {
      const data = event.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue;
      const parsed = JSON.parse(data);
      if ("id" in parsed && ("result" in parsed || "error" in parsed)) message = parsed;
    }
  } else if (text) {
    message = JSON.parse(text);
  }
  return { status: response.status, message: message ?? null, text: message ? undefined : text };
}

let nextId = 1;
async function rawDispatch(request, options) {
  // The port hands over method and params; the id is the host's to assign.
  const framed = { jsonrpc: "2.0", id: `raw-${nextId++}`, ...request };
  const { status, message, text } = await post(framed, options?.context?.headers ?? {}, options?.signal);
  if (!message) throw new Error(`HTTP ${status} without a JSON-RPC answer: ${text}`);
  return message.error ? { kind: "error", error: message.error } : { kind: "result", result: message.result };
}

function errorOf(error) {
  if (process.env.MCP_DEBUG) process.stderr.write(`${error.stack}\ncause: ${error.cause?.stack ?? error.cause}\n`);
  return { code: error.code ?? null, name: error.name ?? null, message: String(error.message ?? error) };
}

const client = new Client(clientInfo, { capabilities: clientCapabilities, versionNegotiation: { mode: { pin: PROTOCOL } } });
let session;
let keepSession = false;
const answers = process.env.MCP_ANSWERS ? JSON.parse(process.env.MCP_ANSWERS) : null;
const asked = [];
const onInputRequest = async (request, context) => {
  asked.push({ kind: request.kind, params: request.params ?? null, delivery: context.delivery, taskId: context.taskId ?? null, inputId: context.inputId ?? null });
  return answers[request.kind];
};
try {
  if (command === "raw") {
    // Bypasses the SDK: exactly one request, framed as 2026-07-28 asks.
    const meta = {
      "io.modelcontextprotocol/protocolVersion": PROTOCOL,
      "io.modelcontextprotocol/clientInfo": clientInfo,
      "io.modelcontextprotocol/clientCapabilities": flag === "no-tasks" ? {} : clientCapabilities,
    };
    const params = { ...JSON.parse(extra ?? "{}"), _meta: meta };
    const { status, message, text } = await post({ jsonrpc: "2.0", id: 1, method: arg, params });
    print({ status, message, text });
    process.exit(0);
  }
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } }));
  session = createTaskSessionFromClient(client, {
    endpointId: "mining-operator-tests",
    rawDispatch,
    v2RequestFraming: { protocolVersion: PROTOCOL, clientInfo, clientCapabilities },
    ...(answers ? { onInputRequest } : {}),
  });
  const args = () => JSON.parse(arg ?? "{}");
  if (command === "init") {
    print({ era: client.getProtocolEra(), capabilities: client.getServerCapabilities(), tasks: session.capabilities });
  } else if (command === "sync") {
    // A 2026-07-28 client that declares no tasks support: the plain SDK call.
    const plain = new Client(clientInfo, { versionNegotiation: { mode: { pin: PROTOCOL } } });
    await plain.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } }));
    await plain.listTools();
    print({ result: await plain.callTool({ name: process.env.MCP_TOOL ?? "start_mining", arguments: args() }) });
    await plain.close();
  } else if (command === "run") {
    const execution = await session.callTool(process.env.MCP_TOOL ?? "start_mining", args(), { task: { preference: "prefer" } });
    const events = [];
    const { outcome } = await execution.settle({
      onEvent: (event) => events.push(event.type === "task" ? { type: "task", status: event.task.status, statusMessage: event.task.statusMessage } : { type: event.type }),
    });
    const settled = { status: outcome.status, task: outcome.task ? { taskId: outcome.task.taskId, status: outcome.task.status } : null };
    if (outcome.status === "completed") settled.result = resultFromTaskOutcome(outcome);
    if (outcome.status === "failed") settled.error = errorOf(outcome.error);
    print({ kind: execution.kind, taskId: execution.handle?.taskId ?? null, events, outcome: settled, asked });
  } else if (command === "start") {
    const execution = await session.callTool(process.env.MCP_TOOL ?? "start_mining", args(), { task: { preference: "require" } });
    const taskId = execution.handle?.taskId ?? null;
    // Hand the task off and leave the session open: ext-tasks 0.2.2's
    // session.close() still cancels an execution that was handed off.
    let reference = null;
    if (execution.kind === "task") await execution.handoff((r) => { reference = r; });
    keepSession = true;
    print({ kind: execution.kind, taskId, reference });
  } else if (command === "listen") {
    // The SDK's own subscriptions/listen: it sends the filter as given and
    // hands notifications it has no handler for to the fallback handler.
    const execution = await session.callTool(process.env.MCP_TOOL ?? "start_mining", args(), { task: { preference: "require" } });
    const taskId = execution.handle?.taskId ?? null;
    if (execution.kind === "task") await execution.handoff(() => {});
    keepSession = true;
    const pushes = [];
    let told;
    const finished = new Promise((resolve) => { told = resolve; });
    client.fallbackNotificationHandler = async (notification) => {
      pushes.push({ method: notification.method, params: notification.params });
      if (notification.method === "notifications/tasks" && notification.params?.status !== "working") told();
    };
    const subscription = await client.listen({ taskIds: [taskId] });
    const ended = await Promise.race([
      subscription.closed,
      finished.then(() => subscription.closed),
      new Promise((resolve) => setTimeout(() => resolve("timeout"), 120_000)),
    ]);
    print({ taskId, honored: subscription.honoredFilter, pushes, ended });
  } else if (command === "get") {
    const view = await session.task(arg).snapshot();
    print({ task: { taskId: view.taskId, status: view.status, statusMessage: view.statusMessage, ttl: view.ttl, pollInterval: view.pollInterval, raw: view.raw } });
  } else if (command === "settle") {
    const outcome = await session.task(arg).result();
    const settled = { status: outcome.status };
    if (outcome.status === "completed") settled.result = outcome.result;
    if (outcome.status === "failed") settled.error = errorOf(outcome.error);
    print({ outcome: settled });
  } else if (command === "cancel") {
    await session.task(arg).cancel();
    print({ cancelled: arg });
  } else {
    throw new Error(`unknown command ${command}`);
  }
} catch (error) {
  print({ error: errorOf(error) });
} finally {
  if (!keepSession) await session?.close().catch(() => {});
  await client.close().catch(() => {});
  process.exit(0);
}
