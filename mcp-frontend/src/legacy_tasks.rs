//! Core tasks of protocol 2025-11-25, answered in front of rmcp.
//!
//! rmcp 3.9 speaks only the 2026-07-28 tasks extension: it drops a
//! 2025-style `params.task`, answers 2025 `tasks/get`/`tasks/cancel` as the
//! extension would, and has no `tasks/result` or `tasks/list`. VS Code, the
//! TypeScript SDK 1.x and the Python SDK 1.x speak this older generation, so
//! this axum middleware answers it for requests whose protocol version is
//! 2025-11-25 and hands every other request to rmcp untouched:
//! - `initialize` advertises `capabilities.tasks`;
//! - `tools/list` marks `start_mining` `taskSupport: "optional"`, the rest `"forbidden"`;
//! - `tools/call` with `params.task` creates the workflow and returns its task;
//! - `tasks/get`, `tasks/result` (watch-driven, bounded), `tasks/list`, `tasks/cancel`.
//!
//! The MiningWorkflow is the only store; a progress token given with the
//! creating call is kept in an annotation so that any replica's
//! `tasks/result` stream can report progress against it.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use k8s_openapi::jiff::Timestamp;
use rmcp::ServerHandler;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cache::Cached;
use crate::ids::{Caller, WorkflowId};
use crate::server::{Answer, App, MiningServer, View, belongs_to};
use crate::tasks::{Generation, TaskSnapshot, snapshot};
use crate::tools::START_MINING;
use crate::workflows;

pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// `_meta` key tying a `tasks/result` answer to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// Annotation holding the creating call's progress token (as JSON).
pub const PROGRESS_TOKEN_ANNOTATION: &str = "mining-operator.dev/progress-token";

const INVALID_PARAMS: i64 = -32602;
const METHOD_NOT_FOUND: i64 = -32601;
const INTERNAL_ERROR: i64 = -32603;
/// The TypeScript SDK's `RequestTimeout`: the wait ran out, call again.
const REQUEST_TIMEOUT: i64 = -32001;

/// What this layer does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    PassThrough,
    Initialize,
    ListTools,
    CreateTask,
    Get,
    Result,
    List,
    Cancel,
}

/// Picks the route from the method, the `MCP-Protocol-Version` header and
/// the params (pure). Only 2025-11-25 requests are answered here.
pub fn route(method: &str, protocol_header: Option<&str>, params: &Value) -> Route {
    if method == "initialize" {
        return match params.get("protocolVersion").and_then(Value::as_str) {
            Some(PROTOCOL_VERSION) => Route::Initialize,
            _ => Route::PassThrough,
        };
    }
    if protocol_header != Some(PROTOCOL_VERSION) {
        return Route::PassThrough;
    }
    match method {
        "tools/list" => Route::ListTools,
        "tools/call" if params.get("task").is_some_and(|task| !task.is_null()) => Route::CreateTask,
        "tasks/get" => Route::Get,
        "tasks/result" => Route::Result,
        "tasks/list" => Route::List,
        "tasks/cancel" => Route::Cancel,
        _ => Route::PassThrough,
    }
}

/// The 2025-11-25 `Task` object.
pub fn task_json(task: &TaskSnapshot) -> Value {
    let mut object = json!({
        "taskId": task.task_id,
        "status": task.state.as_str(),
        "statusMessage": task.status_message,
        "createdAt": task.created_at,
        "lastUpdatedAt": task.last_updated_at,
        "ttl": task.ttl_ms,
    });
    if let Some(interval) = task.poll_interval_ms {
        object["pollInterval"] = json!(interval);
    }
    object
}

/// The tool result a finished task gives: what the synchronous tool returns,
/// in the 2025 shape (no `resultType`), tied to its task.
pub fn task_result_json(task: TaskSnapshot) -> Value {
    let task_id = task.task_id.clone();
    let mut result = Answer::Outcome(task.outcome).into_result();
    result.result_type = None;
    let mut value = serde_json::to_value(result).unwrap_or_else(|_| json!({}));
    value["_meta"] = json!({ RELATED_TASK: { "taskId": task_id } });
    value
}

/// The tools as 2025-11-25 lists them: with `execution.taskSupport`.
pub fn tools_json(tools: &[rmcp::model::Tool]) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|tool| {
            let mut value = serde_json::to_value(tool).unwrap_or_else(|_| json!({}));
            let support = if tool.name == START_MINING { "optional" } else { "forbidden" };
            value["execution"] = json!({ "taskSupport": support });
            value
        })
        .collect();
    json!({ "tools": tools })
}

/// A `tasks/list` cursor: the sort key of the last task handed out.
fn cursor_of(created: i64, name: &str) -> String {
    format!("{created}.{name}")
}

fn parse_cursor(cursor: &str) -> Option<(i64, String)> {
    let (created, name) = cursor.split_once('.')?;
    Some((created.parse().ok()?, WorkflowId::parse(name)?.as_str().to_string()))
}

/// One JSON-RPC error.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    fn unknown_task(task_id: &str) -> Self {
        Self::new(INVALID_PARAMS, format!("unknown task {task_id:?} (it may have expired)"))
    }
}

fn response_json(id: &Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": error.code, "message": error.message}})
        }
    }
}

fn json_response(message: Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], message.to_string()).into_response()
}

/// The middleware. Runs after authentication and after the body was checked
/// to be JSON (and buffered), so reading it again is cheap.
pub async fn answer_core_tasks(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let header = parts.headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    let id = message.get("id").cloned();
    let route = match id {
        Some(_) => route(method, header, &params),
        None => Route::PassThrough,
    };
    if route != Route::PassThrough
        && let (Some(id), Some(caller)) = (id, parts.extensions.get::<Caller>().cloned())
    {
        let layer = CoreTasks { server: MiningServer::new(app), caller };
        return layer.answer(route, id, params, &parts.headers).await;
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

struct CoreTasks {
    server: MiningServer,
    caller: Caller,
}

impl CoreTasks {
    fn app(&self) -> &App {
        &self.server.app
    }

    async fn answer(self, route: Route, id: Value, params: Value, headers: &HeaderMap) -> Response {
        let outcome = match route {
            Route::Initialize => Ok(self.initialize()),
            Route::ListTools => Ok(tools_json(&self.app().tools)),
            Route::CreateTask => self.create(params).await,
            Route::Get => self.get(&params).await,
            Route::List => self.list(&params),
            Route::Cancel => self.cancel(&params).await,
            Route::Result => return self.result(id, &params, headers).await,
            Route::PassThrough => Err(RpcError::new(INTERNAL_ERROR, "not a core-tasks request")),
        };
        json_response(response_json(&id, outcome))
    }

    fn initialize(&self) -> Value {
        let mut info = serde_json::to_value(self.server.get_info()).unwrap_or_else(|_| json!({}));
        info["protocolVersion"] = json!(PROTOCOL_VERSION);
        if let Some(capabilities) = info.get_mut("capabilities").and_then(Value::as_object_mut) {
            // The 2026 extension map means nothing to this generation.
            capabilities.remove("extensions");
            capabilities.insert(
                "tasks".into(),
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
            );
        }
        info
    }

    fn snapshot(&self, workflow: &mining_api::MiningWorkflow) -> TaskSnapshot {
        snapshot(workflow, Timestamp::now(), Generation::Core2025, self.app().default_ttl_seconds)
    }

    /// The workflow behind a task id, if this caller may see it.
    async fn workflow(&self, params: &Value) -> Result<(String, Box<mining_api::MiningWorkflow>), RpcError> {
        let task_id = params.get("taskId").and_then(Value::as_str).unwrap_or_default().to_string();
        let Some(id) = WorkflowId::parse(&task_id) else {
            return Err(RpcError::unknown_task(&task_id));
        };
        match self.server.visible(&self.caller, &id).await {
            Ok(View::Found(workflow)) => Ok((task_id, workflow)),
            Ok(View::Missing) => Err(RpcError::unknown_task(&task_id)),
            Ok(View::Unreadable(problem)) => Err(RpcError::new(
                INTERNAL_ERROR,
                format!("task {task_id}'s stored state cannot be read: {problem}"),
            )),
            Err(problem) => Err(RpcError::new(INTERNAL_ERROR, problem)),
        }
    }

    async fn create(&self, params: Value) -> Result<Value, RpcError> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or_default();
        if !self.app().tools.iter().any(|tool| tool.name == name) {
            return Err(RpcError::new(INVALID_PARAMS, format!("unknown tool {name:?}")));
        }
        if name != START_MINING {
            return Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!(
                    "tool {name} does not run as a task (its taskSupport is \"forbidden\"); call it without params.task"
                ),
            ));
        }
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => None,
            Some(Value::Object(arguments)) => Some(arguments.clone()),
            Some(_) => return Err(RpcError::new(INVALID_PARAMS, "params.arguments must be an object")),
        };
        let token =
            params.pointer("/_meta/progressToken").filter(|t| t.is_string() || t.is_i64() || t.is_u64());
        let annotations: Vec<(&str, String)> =
            token.map(|t| (PROGRESS_TOKEN_ANNOTATION, t.to_string())).into_iter().collect();
        let metrics = &self.app().metrics;
        match self.server.create_workflow(&self.caller, arguments, &annotations).await {
            Ok((_, workflow, _)) => {
                metrics
                    .tool_calls
                    .get_or_create(&crate::metrics::ToolLabels { tool: START_MINING, outcome: "task" })
                    .inc();
                Ok(json!({ "task": task_json(&self.snapshot(&workflow)) }))
            }
            Err(answer) => {
                let outcome = answer.metric_outcome();
                metrics
                    .tool_calls
                    .get_or_create(&crate::metrics::ToolLabels { tool: START_MINING, outcome })
                    .inc();
                let code = if outcome == "invalid_arguments" { INVALID_PARAMS } else { INTERNAL_ERROR };
                let text =
                    answer.into_result().content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
                Err(RpcError::new(code, text.unwrap_or_else(|| "the task was not created".into())))
            }
        }
    }

    async fn get(&self, params: &Value) -> Result<Value, RpcError> {
        let (_, workflow) = self.workflow(params).await?;
        Ok(task_json(&self.snapshot(&workflow)))
    }

    fn list(&self, params: &Value) -> Result<Value, RpcError> {
        let after =
            match params.get("cursor") {
                None | Some(Value::Null) => None,
                Some(cursor) => Some(cursor.as_str().and_then(parse_cursor).ok_or_else(|| {
                    RpcError::new(INVALID_PARAMS, "invalid cursor: pass nextCursor as given")
                })?),
            };
        let mut rows: Vec<((i64, String), Box<mining_api::MiningWorkflow>)> = self
            .app()
            .cache
            .list_for(&self.caller.label)
            .into_iter()
            .filter_map(|cached| match cached {
                Cached::Found(workflow) => {
                    let created =
                        workflow.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second());
                    Some(((created, workflow.metadata.name.clone().unwrap_or_default()), workflow))
                }
                _ => None,
            })
            .collect();
        // Newest first; the cursor is a sort key, so new tasks never shift a page.
        rows.sort_by(|a, b| b.0.0.cmp(&a.0.0).then_with(|| a.0.1.cmp(&b.0.1)));
        let start = match &after {
            None => 0,
            Some((created, name)) => rows
                .iter()
                .position(|((c, n), _)| c < created || (c == created && n > name))
                .unwrap_or(rows.len()),
        };
        let page: Vec<_> = rows.iter().skip(start).take(self.app().task_list_page_size).collect();
        let tasks: Vec<Value> =
            page.iter().map(|(_, workflow)| task_json(&self.snapshot(workflow))).collect();
        let mut result = json!({ "tasks": tasks });
        if start + page.len() < rows.len()
            && let Some(((created, name), _)) = page.last()
        {
            result["nextCursor"] = json!(cursor_of(*created, name));
        }
        Ok(result)
    }

    async fn cancel(&self, params: &Value) -> Result<Value, RpcError> {
        let (task_id, workflow) = self.workflow(params).await?;
        let task = self.snapshot(&workflow);
        if task.state.is_terminal() {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("Cannot cancel task in terminal status: {}", task.state.as_str()),
            ));
        }
        let patched = workflows::request_cancel(&self.app().api, &task_id).await.map_err(|err| {
            self.app()
                .metrics
                .api_errors
                .get_or_create(&crate::metrics::ReasonLabels { reason: "patch" })
                .inc();
            RpcError::new(INTERNAL_ERROR, format!("could not cancel: {err}"))
        })?;
        tracing::info!(workflow = %task_id, caller = %self.caller.name, "cancel requested (tasks/cancel)");
        // `spec.cancel` is recorded: this and every later read say `cancelled`.
        Ok(task_json(&self.snapshot(&patched)))
    }

    /// `tasks/result`: waits (woken by the watch) until the operator has
    /// finished the workflow, then returns the tool result; streams progress
    /// against the creating call's token when the client takes SSE.
    async fn result(self, id: Value, params: &Value, headers: &HeaderMap) -> Response {
        let (task_id, workflow) = match self.workflow(params).await {
            Ok(found) => found,
            Err(error) => return json_response(response_json(&id, Err(error))),
        };
        let token: Option<Value> = workflow
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROGRESS_TOKEN_ANNOTATION))
            .and_then(|t| serde_json::from_str(t).ok());
        let takes_sse = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.contains("text/event-stream"));
        let (sender, mut receiver) = mpsc::channel::<Value>(4);
        let deadline = Instant::now() + self.app().task_result_wait;
        tokio::spawn(self.wait_for_result(id, task_id, token.filter(|_| takes_sse), deadline, sender));
        if !takes_sse {
            let message = receiver.recv().await.unwrap_or(Value::Null);
            return json_response(message);
        }
        let stream = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
            .map(|message| Ok::<_, Infallible>(Event::default().data(message.to_string())));
        Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
    }

    /// Sends progress notifications (when `token` is set) and then the one
    /// response; stops early when the client has gone.
    async fn wait_for_result(
        self,
        id: Value,
        task_id: String,
        token: Option<Value>,
        deadline: Instant,
        sender: mpsc::Sender<Value>,
    ) {
        let cache = self.app().cache.clone();
        let mut subscription = cache.subscribe(&task_id);
        let mut reported: Option<u32> = None;
        let outcome = loop {
            let workflow = match cache.get(&task_id) {
                Cached::Found(workflow) if belongs_to(&workflow, &self.caller) => workflow,
                Cached::Unreadable { problem, .. } => {
                    break Err(RpcError::new(
                        INTERNAL_ERROR,
                        format!("task {task_id}'s stored state cannot be read: {problem}"),
                    ));
                }
                _ => match self.workflow(&json!({ "taskId": task_id })).await {
                    Ok((_, workflow)) => workflow,
                    Err(error) => break Err(error),
                },
            };
            let task = self.snapshot(&workflow);
            if let (Some(token), Some(progress)) = (&token, task.outcome.progress)
                && reported.is_none_or(|done| progress.blocks_done > done)
            {
                reported = Some(progress.blocks_done);
                let notification = json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {
                        "progressToken": token,
                        "progress": progress.blocks_done,
                        "total": progress.blocks_total,
                        "message": task.status_message,
                    },
                });
                if sender.send(notification).await.is_err() {
                    return;
                }
            }
            if task.result_ready {
                break Ok(task_result_json(task));
            }
            if Instant::now() >= deadline {
                let seconds = self.app().task_result_wait.as_secs();
                break Err(RpcError::new(
                    REQUEST_TIMEOUT,
                    format!(
                        "task {task_id} is still {} after {seconds} s ({}); call tasks/result again, or poll tasks/get",
                        task.state.as_str(),
                        task.status_message
                    ),
                ));
            }
            tokio::select! {
                () = subscription.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = sender.closed() => return,
            }
        };
        let _ = sender.send(response_json(&id, outcome)).await;
    }
}

#[cfg(test)]
mod tests;
