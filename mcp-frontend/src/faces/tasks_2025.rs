//! Core tasks of protocol 2025-11-25, answered in front of rmcp.
//!
//! rmcp 3.9 speaks only the 2026-07-28 tasks extension: it drops a
//! 2025-style `params.task`, answers 2025 `tasks/get`/`tasks/cancel` as the
//! extension would, and has no `tasks/result` or `tasks/list`. VS Code, the
//! TypeScript SDK 1.x and the Python SDK 1.x speak this older generation, so
//! this axum middleware answers it for requests whose protocol version is
//! 2025-11-25 and hands every other request to rmcp untouched:
//! - `initialize` advertises `capabilities.tasks`;
//! - `tools/list` marks `start_mining` and the defined tools `taskSupport: "optional"`, the rest `"forbidden"`;
//! - `tools/call` with `params.task` creates the workflow and returns its task;
//! - `tasks/get`, `tasks/result` (watch-driven, bounded), `tasks/list`, `tasks/cancel`.
//!
//! The MiningWorkflow is the only store; a progress token given with the
//! creating call is kept in an annotation so that any replica's
//! `tasks/result` stream can report progress against it.

use mining_api::Work as _;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use k8s_openapi::jiff::Timestamp;
use mining_api::annotations;

use super::JsonBody;
use rmcp::ErrorData as McpError;
use rmcp::ServerHandler;
use rmcp::model::ErrorCode;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::mcp_tools::McpServer;
pub use super::tasks_2025_wire::*;
use super::{idempotency_key_of, incoming_trace, json_response, missing_task, response_json};
use crate::core::{Answer, Any, CancelOutcome, Core, StartOptions, View, WaitListener};
use crate::ids::Caller;
use crate::tasks::{Generation, TaskSnapshot, snapshot_any};

/// The middleware. Runs after authentication and after the body was checked
/// to be JSON, and reads what that check parsed.
pub async fn answer_core_tasks(State(core): State<Arc<Core>>, request: Request, next: Next) -> Response {
    // Parsed once, by the layer that checked the body was JSON.
    let Some(JsonBody(message)) = request.extensions().get::<JsonBody>().cloned() else {
        return next.run(request).await;
    };
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let header = request.headers().get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    let id = message.get("id").cloned();
    let route = match id {
        // A response (no method) to a request one of our streams put to the client.
        Some(_)
            if method.is_empty()
                && header == Some(PROTOCOL_VERSION)
                && input_response_of(&message).is_some() =>
        {
            Route::InputResponse
        }
        Some(_) => route(method, header, &params),
        None => Route::PassThrough,
    };
    let params = if route == Route::InputResponse { (*message).clone() } else { params };
    if route != Route::PassThrough
        && let (Some(id), Some(caller)) = (id, request.extensions().get::<Caller>().cloned())
    {
        let layer = CoreTasks { core, caller };
        return layer.answer(route, id, params, request.headers()).await;
    }
    next.run(request).await
}

struct CoreTasks {
    core: Arc<Core>,
    caller: Caller,
}

/// A `tasks/result` wait: progress goes to the SSE stream, against the
/// creating call's token, when the client takes SSE and gave one.
struct ResultStreamListener {
    token: Option<Value>,
    sender: mpsc::Sender<Value>,
    /// The task streamed, when the stream can carry requests to the client
    /// (SSE): what it asks is put to the client here, each key once.
    asking: Option<String>,
    asked: std::collections::HashSet<String>,
}

impl WaitListener for ResultStreamListener {
    async fn progress(&mut self, progress: f64, total: u32, message: &str) -> bool {
        let Some(token) = &self.token else { return true };
        let notification = json!({
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {
                "progressToken": token,
                "progress": progress,
                "total": total,
                "message": message,
            },
        });
        self.sender.send(notification).await.is_ok()
    }

    async fn gone(&self) {
        self.sender.closed().await;
    }

    /// 2025-11-25: the requests go to the client on this stream, tied to
    /// their task; its responses come back as POSTs to any replica
    /// ([`CoreTasks::input_response`]), and the wait goes on.
    async fn asks(&mut self, requests: &serde_json::Map<String, Value>) -> bool {
        let Some(task_id) = self.asking.clone() else { return false };
        for (key, request) in requests {
            if self.asked.insert(key.clone())
                && self.sender.send(input_request_json(&task_id, key, request)).await.is_err()
            {
                return false;
            }
        }
        true
    }
}

impl CoreTasks {
    async fn answer(self, route: Route, id: Value, params: Value, headers: &HeaderMap) -> Response {
        let outcome = match route {
            Route::Initialize => Ok(self.initialize()),
            Route::ListTools => {
                let listed = self.core.listed_tools(&self.caller).await;
                Ok(tools_json(&listed, |name| {
                    self.core
                        .catalog
                        .get(name)
                        .map(|tool| tool.spec.task_support.unwrap_or_default().as_str())
                }))
            }
            Route::CreateTask => self.create(params, headers).await,
            Route::Get => self.get(&params).await,
            Route::List => self.list(&params),
            Route::Cancel => self.cancel(&params).await,
            Route::Result => return self.result(id, &params, headers).await,
            Route::InputResponse => return self.input_response(&params).await,
            Route::PassThrough => Err(McpError::internal_error("not a core-tasks request", None)),
        };
        json_response(response_json(&id, outcome))
    }

    fn initialize(&self) -> Value {
        let info = McpServer::new(self.core.clone()).get_info();
        let mut info = serde_json::to_value(info).unwrap_or_else(|_| json!({}));
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

    fn snapshot(&self, work: &Any) -> TaskSnapshot {
        snapshot_any(
            work,
            Timestamp::now(),
            Generation::Core2025,
            self.core.default_ttl_seconds,
            self.core.operator_presence(),
        )
    }

    /// The work behind `params.taskId`, of whichever kind, if this caller may see it.
    async fn task(&self, params: &Value) -> Result<(String, Box<Any>), McpError> {
        let task_id = task_id_of(params);
        let view = self.core.resolve(&self.caller, &task_id).await;
        self.found(&task_id, view).map(|work| (task_id, work))
    }

    async fn create(&self, params: Value, headers: &HeaderMap) -> Result<Value, McpError> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or_default();
        let Some(called) = super::called(&self.core, name) else {
            return Err(McpError::invalid_params(format!("unknown tool {name:?}"), None));
        };
        let forbidden = matches!(&called, super::Called::Defined(tool)
            if tool.spec.task_support == Some(mining_api::tool_face::TaskSupport::Forbidden));
        let Some(starter) = called.starter().filter(|_| !forbidden) else {
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "tool {name} does not run as a task (its taskSupport is \"forbidden\"); call it without params.task"
                ),
                None,
            ));
        };
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => None,
            Some(Value::Object(arguments)) => Some(arguments.clone()),
            Some(_) => return Err(McpError::invalid_params("params.arguments must be an object", None)),
        };
        let meta = params.get("_meta").and_then(Value::as_object);
        let token = params
            .pointer("/_meta/progressToken")
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .map(Value::to_string);
        // Kept on the work for its whole retention: bounded, and refused
        // (nothing created) rather than cut.
        if let Some(token) = token.as_ref().filter(|t| t.len() > MAX_PROGRESS_TOKEN_BYTES) {
            return Err(McpError::invalid_params(
                format!(
                    "_meta.progressToken is {} bytes of JSON; at most {MAX_PROGRESS_TOKEN_BYTES} are kept with a task",
                    token.len()
                ),
                None,
            ));
        }
        let annotations: Vec<(&str, String)> =
            token.map(|t| (annotations::PROGRESS_TOKEN, t)).into_iter().collect();
        let trace = incoming_trace(meta, Some(headers));
        let retention = task_retention_seconds(params.pointer("/task/ttl"), self.core.default_ttl_seconds)
            .map_err(|problem| McpError::invalid_params(problem, None))?;
        let options = StartOptions {
            annotations: &annotations,
            retention_seconds: retention,
            trace,
            idempotency_key: idempotency_key_of(meta),
        };
        let started = self.core.start_any(&self.caller, starter, arguments, options).await;
        let label = called.label();
        match started {
            Ok(work) => {
                self.core.record_call(label, "task", None);
                Ok(json!({ "task": task_json(&self.snapshot(&work)) }))
            }
            Err(answer) => {
                self.core.record_call(label, answer.metric_outcome(), None);
                let code = match answer {
                    // A tool the caller is not granted is, for it, no tool.
                    Answer::InvalidArguments(_) | Answer::NotGranted(_) => ErrorCode::INVALID_PARAMS,
                    _ => ErrorCode::INTERNAL_ERROR,
                };
                let text = answer.error_text().unwrap_or("the task was not created").to_string();
                Err(McpError::new(code, text, None))
            }
        }
    }

    async fn get(&self, params: &Value) -> Result<Value, McpError> {
        let (_, work) = self.task(params).await?;
        Ok(task_json(&self.snapshot(&work)))
    }

    fn list(&self, params: &Value) -> Result<Value, McpError> {
        let after =
            match params.get("cursor") {
                None | Some(Value::Null) => None,
                Some(cursor) => Some(cursor.as_str().and_then(parse_cursor).ok_or_else(|| {
                    McpError::invalid_params("invalid cursor: pass nextCursor as given", None)
                })?),
            };
        // Every kind of work, one order: newest first, then by name.
        let rows = self.core.list_any(&self.caller);
        // The cursor is a sort key, so new tasks never shift a page.
        let start = match &after {
            None => 0,
            Some((created, name)) => {
                rows.iter().position(|row| row.comes_after(*created, name)).unwrap_or(rows.len())
            }
        };
        let page: Vec<_> = rows.iter().skip(start).take(self.core.task_list_page_size).collect();
        let tasks: Vec<Value> = page.iter().map(|row| task_json(&self.snapshot(&row.work))).collect();
        let mut result = json!({ "tasks": tasks });
        if start + page.len() < rows.len()
            && let Some(last) = page.last()
        {
            result["nextCursor"] = json!(cursor_of(last.created, &last.name));
        }
        Ok(result)
    }

    async fn cancel(&self, params: &Value) -> Result<Value, McpError> {
        let (_, work) = self.task(params).await?;
        let cancelled = self.core.cancel_any(&self.caller, *work).await;
        let work = match cancelled.map_err(|problem| McpError::internal_error(problem, None))? {
            CancelOutcome::NotCancelled(view) => {
                return self.found(&task_id_of(params), Ok(view)).map(|_| Value::Null);
            }
            CancelOutcome::Requested(work) => work,
            // Finished, or cancelled by an earlier call: this generation
            // calls either state terminal and refuses a second cancel.
            CancelOutcome::AlreadyFinished(work) | CancelOutcome::AlreadyRequested(work) => {
                return Err(McpError::invalid_params(
                    format!("Cannot cancel task in terminal status: {}", self.snapshot(&work).state.as_str()),
                    None,
                ));
            }
        };
        // `spec.cancel` is recorded: this and every later read say `cancelled`.
        Ok(task_json(&self.snapshot(&work)))
    }

    /// `tasks/result`: waits (woken by the watch) until the operator has
    /// finished the work, then returns the tool result; streams progress
    /// against the creating call's token when the client takes SSE.
    async fn result(self, id: Value, params: &Value, headers: &HeaderMap) -> Response {
        let (task_id, work) = match self.task(params).await {
            Ok(found) => found,
            Err(error) => return json_response(response_json(&id, Err(error))),
        };
        let token: Option<Value> =
            crate::each_kind!(&*work, work => work.annotation(annotations::PROGRESS_TOKEN))
                .and_then(|t| serde_json::from_str(t).ok());
        let takes_sse = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.contains("text/event-stream"));
        let (sender, mut receiver) = mpsc::channel::<Value>(4);
        let listener = ResultStreamListener {
            token: token.filter(|_| takes_sse),
            sender,
            asking: takes_sse.then(|| task_id.clone()),
            asked: Default::default(),
        };
        // On a stream, a status change seen during the wait is told as
        // `notifications/tasks/status` (the full task, as tasks/get gives it).
        let status_before = takes_sse.then(|| self.snapshot(&work).state.as_str());
        tokio::spawn(self.wait_for_result(id, task_id, *work, listener, status_before));
        if !takes_sse {
            let message = receiver.recv().await.unwrap_or(Value::Null);
            return json_response(message);
        }
        let stream = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
            .map(|message| Ok::<_, Infallible>(Event::default().data(message.to_string())));
        // As rmcp does for its own streams: a buffering proxy (nginx) would
        // hold progress notifications until the response ends.
        let mut response = Sse::new(stream).keep_alive(KeepAlive::default()).into_response();
        response.headers_mut().insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
        response
    }

    /// The core's wait, then the one response; nothing is sent when the
    /// client has gone.
    async fn wait_for_result(
        self,
        id: Value,
        task_id: String,
        work: Any,
        mut listener: ResultStreamListener,
        status_before: Option<&'static str>,
    ) {
        let deadline = Instant::now() + self.core.task_result_wait;
        let view = self.core.wait_any(&self.caller, work, deadline, &mut listener).await;
        if listener.sender.is_closed() {
            return;
        }
        if let (Some(before), View::Found(work)) = (status_before, &view) {
            let task = self.snapshot(work);
            if task.state.as_str() != before {
                let _ = listener.sender.send(status_notification(&task)).await;
            }
        }
        let outcome = self.found(&task_id, Ok(view)).and_then(|work| {
            let task = self.snapshot(&work);
            if task.result_ready {
                return Ok(task_result_json(task));
            }
            let seconds = self.core.task_result_wait.as_secs();
            Err(McpError::new(
                REQUEST_TIMEOUT,
                format!(
                    "task {task_id} is still {} after {seconds} s ({}); call tasks/result again, or poll tasks/get",
                    task.state.as_str(),
                    task.status_message
                ),
                None,
            ))
        });
        let _ = listener.sender.send(response_json(&id, outcome)).await;
    }
}

impl CoreTasks {
    /// A client's response to a request a `tasks/result` stream put to it:
    /// recorded as the caller's answer (proof-bound, checked against the
    /// request), whichever replica streamed the request. Accepted with 202,
    /// as every response a client sends is; a refused answer is logged and
    /// the request stays asked (the next `tasks/result` asks it again).
    async fn input_response(&self, message: &Value) -> Response {
        if let Some((task_id, key, result)) = input_response_of(message) {
            let answers: serde_json::Map<String, Value> = [(key.clone(), result)].into_iter().collect();
            match self.core.respond(&self.caller, &task_id, &answers).await {
                Ok(_) => {}
                Err(
                    crate::core::RespondError::Invalid(why)
                    | crate::core::RespondError::Unavailable(why)
                    | crate::core::RespondError::NotGranted(why),
                ) => {
                    tracing::info!(task = %task_id, key = %key, caller = %self.caller.name, why = %why, "answer not taken");
                }
                Err(crate::core::RespondError::NotFound) => {}
            }
        }
        axum::http::StatusCode::ACCEPTED.into_response()
    }
}

fn task_id_of(params: &Value) -> String {
    params.get("taskId").and_then(Value::as_str).unwrap_or_default().to_string()
}

impl CoreTasks {
    /// A task this caller may see, or the error this generation gives for it.
    fn found(&self, task_id: &str, view: Result<View<Any>, String>) -> Result<Box<Any>, McpError> {
        found(task_id, view, || missing_task(&self.core, &self.caller, task_id))
    }
}

fn found<K>(
    task_id: &str,
    view: Result<View<K>, String>,
    missing: impl FnOnce() -> McpError,
) -> Result<Box<K>, McpError> {
    match view {
        Ok(View::Found(work)) => Ok(work),
        Ok(View::Missing) => Err(missing()),
        Ok(View::Unreadable(problem)) => Err(McpError::internal_error(
            format!("task {task_id}'s stored state cannot be read: {problem}"),
            None,
        )),
        Ok(View::NotGranted(why)) => Err(McpError::invalid_request(why, None)),
        Err(problem) => Err(McpError::internal_error(problem, None)),
    }
}

#[cfg(test)]
#[path = "tasks_2025_tests.rs"]
mod tests;
