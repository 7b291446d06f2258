//! `subscriptions/listen` for tasks (the 2026-07-28 Tasks extension),
//! answered in front of rmcp: rmcp 3.11's subscription sink refuses
//! `notifications/tasks` ("pending the subscriptions/listen rewrite").
//!
//! A listen names task ids; the answer is an SSE stream that:
//! - first acknowledges exactly those ids that are the caller's own tasks
//!   (`notifications/subscriptions/acknowledged`; other ids are left out,
//!   never named), then tells each acknowledged task's state as it is now;
//! - then sends `notifications/tasks` (the full task, as `tasks/get` gives
//!   it) whenever a task's status or status message changes — woken by the
//!   one workflow watch (or the one tool run watch, for a defined tool's
//!   task), so a listen on any replica hears of work done through another —
//!   and nothing else (no progress, no log messages);
//! - tags every message with the listen's id in `_meta`;
//! - ends with the listen's result once every acknowledged task is
//!   finished and told, or when the server stops; a listen that
//!   acknowledged no task stays open (keep-alive comments) until the client
//!   closes it, so clients that reopen ended listens do not spin.
//!
//! Listens are bounded per caller and in total, per replica: one more is
//! refused with the cap and a retry hint. Closing the stream releases the
//! slot, the watch interest and the task at once.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use rmcp::ErrorData as McpError;
use rmcp::model::{ClientCapabilities, ErrorCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::JsonBody;
use super::{json_response, response_json, tasks_2026};
use crate::cache::Subscription;
use crate::core::{Any, Core, Refreshed, View, WaitCap};
use crate::ids::Caller;
use crate::metrics::ReasonLabels;
use crate::tasks::TaskState;
use crate::tool_runs::access::Denied;

pub const METHOD: &str = "subscriptions/listen";
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// `_meta` key naming the listen a message belongs to (its request id).
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// `_meta` key of a 2026-07-28 request's client capabilities.
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// Most task ids one listen may name (each is a watch interest held open).
pub const MAX_TASK_IDS_PER_LISTEN: usize = 64;
/// When a caller refused for too many open listens may try again.
pub const LISTEN_RETRY_SECONDS: u64 = 5;
/// JSON-RPC's range for server-defined errors: the listen caps.
const TOO_MANY_LISTENS: ErrorCode = ErrorCode(-32000);

/// What a listen asks for (pure parse of its params).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenRequest {
    /// The task ids named, without repeats; `None` when tasks were not asked for.
    pub task_ids: Option<Vec<String>>,
    /// The request declares the Tasks extension among its client capabilities.
    pub declares_tasks: bool,
    /// `notifications.toolsListChanged: true`: told when the tools change
    /// (an `McpTool` defined, edited or deleted).
    pub tools_list_changed: bool,
}

/// Reads a listen's params, or the error that refuses it (pure).
pub fn parse_listen(params: &Value) -> Result<ListenRequest, McpError> {
    let Some(notifications) = params.get("notifications").and_then(Value::as_object) else {
        return Err(McpError::invalid_params("params.notifications must be an object", None));
    };
    let task_ids = match notifications.get("taskIds") {
        None | Some(Value::Null) => None,
        Some(Value::Array(ids)) => {
            if ids.len() > MAX_TASK_IDS_PER_LISTEN {
                return Err(McpError::invalid_params(
                    format!(
                        "notifications.taskIds names {} tasks; one listen takes at most \
                         {MAX_TASK_IDS_PER_LISTEN} (open another listen for the rest)",
                        ids.len()
                    ),
                    None,
                ));
            }
            let mut unique: Vec<String> = Vec::with_capacity(ids.len());
            for id in ids {
                let id = id.as_str().ok_or_else(|| {
                    McpError::invalid_params("notifications.taskIds must be an array of strings", None)
                })?;
                if !unique.iter().any(|seen| seen == id) {
                    unique.push(id.to_string());
                }
            }
            Some(unique)
        }
        Some(_) => return Err(McpError::invalid_params("notifications.taskIds must be an array", None)),
    };
    let declares_tasks = params
        .pointer("/_meta")
        .and_then(|meta| meta.get(CLIENT_CAPABILITIES))
        .and_then(|capabilities| serde_json::from_value::<ClientCapabilities>(capabilities.clone()).ok())
        .is_some_and(|capabilities| capabilities.supports_tasks());
    let tools_list_changed = notifications.get("toolsListChanged").and_then(Value::as_bool).unwrap_or(false);
    Ok(ListenRequest { task_ids, declares_tasks, tools_list_changed })
}

/// The error for task notifications asked without the extension declared.
pub fn missing_capability() -> McpError {
    McpError::missing_required_client_capability(ClientCapabilities::builder().enable_tasks().build())
}

/// The refusal of a listen over a cap: which cap, and when to retry (pure).
pub fn too_many_listens(cap: WaitCap, per_caller: usize, total: usize) -> McpError {
    let (limit, scope) = match cap {
        WaitCap::PerCaller => (per_caller, "for one caller"),
        WaitCap::Total => (total, "in total"),
    };
    McpError::new(
        TOO_MANY_LISTENS,
        format!(
            "too many open subscriptions/listen streams: this server holds at most {limit} {scope}; \
             close one, or retry in {LISTEN_RETRY_SECONDS} s (polling tasks/get always works)"
        ),
        Some(json!({"limit": cap.metric_label(), "max": limit, "retryAfterSeconds": LISTEN_RETRY_SECONDS})),
    )
}

/// A notification of listen `subscription` (pure).
pub fn tagged(method: &str, mut params: Value, subscription: &Value) -> Value {
    if let Some(object) = params.as_object_mut() {
        let meta = object.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(SUBSCRIPTION_ID.into(), subscription.clone());
        }
    }
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// The acknowledgement: the task ids this listen will be told about, and
/// whether tool list changes are (pure).
pub fn acknowledgement(accepted: Option<&[String]>, tools_list_changed: bool, subscription: &Value) -> Value {
    let mut notifications = match accepted {
        Some(ids) => json!({"taskIds": ids}),
        None => json!({}),
    };
    if tools_list_changed {
        notifications["toolsListChanged"] = json!(true);
    }
    tagged("notifications/subscriptions/acknowledged", json!({"notifications": notifications}), subscription)
}

/// The listen's result, which ends it gracefully (pure).
pub fn closing(subscription: &Value) -> Value {
    response_json(subscription, Ok(json!({"_meta": {SUBSCRIPTION_ID: subscription}})))
}

/// The middleware state: the core, and the token that says the server stops.
#[derive(Clone)]
pub struct ListenState {
    pub core: Arc<Core>,
    pub stopping: CancellationToken,
}

/// Answers 2026-07-28 `subscriptions/listen` requests; passes every other on.
pub async fn answer_listens(State(state): State<ListenState>, request: Request, next: Next) -> Response {
    let Some(JsonBody(message)) = request.extensions().get::<JsonBody>().cloned() else {
        return next.run(request).await;
    };
    let protocol = request.headers().get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    let is_listen =
        message.get("method").and_then(Value::as_str) == Some(METHOD) && protocol == Some(PROTOCOL_VERSION);
    let (Some(id), Some(caller), true) =
        (message.get("id").cloned(), request.extensions().get::<Caller>().cloned(), is_listen)
    else {
        return next.run(request).await;
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let listen = match parse_listen(&params) {
        Ok(listen) if listen.task_ids.is_some() && !listen.declares_tasks => Err(missing_capability()),
        parsed => parsed,
    };
    let listen = match listen {
        Ok(listen) => listen,
        Err(error) => return json_response(response_json(&id, Err(error))),
    };
    let (sender, mut receiver) = mpsc::channel::<Value>(8);
    tokio::spawn(run_listen(state, caller, id, listen, sender));
    // The first message is the refusal (a response) or the acknowledgement.
    let Some(first) = receiver.recv().await else {
        return json_response(json!({"jsonrpc": "2.0", "id": Value::Null,
            "error": McpError::internal_error("the listen ended before it began", None)}));
    };
    if first.get("id").is_some() {
        return json_response(first);
    }
    let rest = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx));
    let stream = futures::stream::once(async { first })
        .chain(rest)
        .map(|message| Ok::<_, Infallible>(Event::default().data(message.to_string())));
    let mut response = Sse::new(stream).keep_alive(KeepAlive::default()).into_response();
    // A buffering proxy (nginx) would hold the notifications back.
    response.headers_mut().insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
    response
}

/// One acknowledged task, as this listen follows it.
struct Followed<'a> {
    /// Woken by the watch of the task's kind.
    subscription: Subscription<'a>,
    latest: Any,
    seen_in_cache: bool,
    /// The status and message last told.
    told: Option<(TaskState, String)>,
    /// Finished and told, or gone: nothing more will be said of it.
    done: bool,
}

/// Counts an open listen while it lives.
struct OpenListen<'a>(&'a Core);

impl Drop for OpenListen<'_> {
    fn drop(&mut self) {
        self.0.metrics.listens_open.dec();
    }
}

/// The listen's life: a slot, the acknowledgement, then the notifications
/// until nothing more can come, the client goes, or the server stops.
async fn run_listen(
    state: ListenState,
    caller: Caller,
    id: Value,
    listen: ListenRequest,
    sender: mpsc::Sender<Value>,
) {
    let ListenRequest { task_ids, tools_list_changed, .. } = listen;
    let core = &*state.core;
    // Subscribed before the acknowledgement, so no change after it is missed.
    let mut tool_changes = tools_list_changed.then(|| core.catalog.subscribe());
    let _slot = match core.listens.take(&caller.digest) {
        Ok(slot) => slot,
        Err(cap) => {
            core.metrics.listens_refused.get_or_create(&ReasonLabels { reason: cap.metric_label() }).inc();
            let (per_caller, total) = core.listens.caps();
            let _ = sender.send(response_json(&id, Err(too_many_listens(cap, per_caller, total)))).await;
            return;
        }
    };
    core.metrics.listens_open.inc();
    let _open = OpenListen(core);
    let mut followed: Vec<Followed<'_>> = Vec::new();
    let mut accepted: Vec<String> = Vec::new();
    for task_id in task_ids.iter().flatten() {
        let latest = match core.resolve(&caller, task_id).await {
            Ok(View::Found(latest)) => *latest,
            _ => continue,
        };
        // Subscribed before the first read of the loop below, so no change
        // after the one that read tells is missed.
        let subscription = core.subscribe_any(&latest);
        accepted.push(task_id.clone());
        followed.push(Followed { subscription, latest, seen_in_cache: false, told: None, done: false });
    }
    let accepted = task_ids.as_ref().map(|_| accepted.as_slice());
    if sender.send(acknowledgement(accepted, tools_list_changed, &id)).await.is_err() {
        return;
    }
    tracing::debug!(tasks = followed.len(), "listen opened");
    loop {
        for task in followed.iter_mut().filter(|task| !task.done) {
            let Some(notification) = next_notification(core, &caller, task, &id) else { continue };
            // Each notification needs what a request about the run needs:
            // a grant revoked since the listen began ends its news of the
            // run; one that cannot be checked now holds it back until the
            // run's next change (fail closed; tasks/get still answers).
            match core.still_granted(&caller, &task.latest).await {
                Ok(()) => {}
                Err(Denied::NotGranted(_)) => {
                    tracing::debug!(task = task.latest.name(), "grant revoked: the listen stops following");
                    task.done = true;
                    continue;
                }
                Err(Denied::CannotCheck(_)) => {
                    (task.told, task.done) = (None, false);
                    continue;
                }
            }
            if sender.send(notification).await.is_err() {
                return;
            }
        }
        if !followed.is_empty() && followed.iter().all(|task| task.done) && tool_changes.is_none() {
            let _ = sender.send(closing(&id)).await;
            return;
        }
        let mut changes: Vec<_> = followed
            .iter_mut()
            .filter(|task| !task.done)
            .map(|task| Box::pin(task.subscription.changed()))
            .collect();
        let any_change = async {
            if changes.is_empty() {
                std::future::pending::<()>().await;
            }
            futures::future::select_all(changes.iter_mut()).await;
        };
        let tools_changed = async {
            let gone = match tool_changes.as_mut() {
                Some(changes) => changes.changed().await.is_err(),
                None => true,
            };
            if gone {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = any_change => {}
            () = tools_changed => {
                let notification = tagged("notifications/tools/list_changed", json!({}), &id);
                if sender.send(notification).await.is_err() {
                    return;
                }
            }
            () = sender.closed() => return,
            () = state.stopping.cancelled() => {
                let _ = sender.send(closing(&id)).await;
                return;
            }
        }
    }
}

/// What to tell of `task` now, if anything (and records it as told).
fn next_notification(core: &Core, caller: &Caller, task: &mut Followed<'_>, id: &Value) -> Option<Value> {
    // The task as the watch has it now; nothing true to tell while unreadable.
    match core.refresh_any(caller, &mut task.latest, &mut task.seen_in_cache) {
        Refreshed::Current => {}
        Refreshed::Unreadable(_) => return None,
        // Deleted (its retention ran out), or no longer the caller's.
        Refreshed::Gone => {
            task.done = true;
            return None;
        }
    }
    let (state, detailed) = tasks_2026::detailed_json(core, &task.latest);
    let message = detailed.get("statusMessage").and_then(Value::as_str).unwrap_or_default().to_string();
    let now = (state, message);
    if task.told.as_ref() == Some(&now) {
        return None;
    }
    task.done = state.is_terminal();
    task.told = Some(now);
    core.metrics.task_notifications.inc();
    Some(tagged("notifications/tasks", detailed, id))
}

#[cfg(test)]
#[path = "listen_2026_tests.rs"]
mod tests;
