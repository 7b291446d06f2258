//! `resources/read` of a run's files, answered in front of rmcp for every
//! protocol version: rmcp builds a whole `ReadResourceResult` in memory,
//! and a file may be gigabytes, so this layer writes the JSON-RPC response
//! itself, base64-encoding the bytes as they come from the operator. Only
//! the caller whose run it is reads it (the same lookup as every call about
//! a run: another caller's, a guessed or a malformed URI are all "not
//! found"); `resources/list` and `resources/templates/list` are rmcp's
//! (`faces::mcp_tools`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use mining_api::tool_outputs::{self, ToolOutput};
use mining_api::{ToolRun, ToolRunPhase};
use rmcp::ErrorData as McpError;
use serde_json::{Value, json};

use super::{JsonBody, json_response, response_json};
use crate::core::{Core, View};
use crate::ids::Caller;
use crate::run_files::ReadError;

/// The middleware: `resources/read` of a run's file; anything else goes on.
pub async fn answer_resources(State(core): State<Arc<Core>>, request: Request, next: Next) -> Response {
    let Some(JsonBody(message)) = request.extensions().get::<JsonBody>().cloned() else {
        return next.run(request).await;
    };
    let (Some(id), Some("resources/read")) =
        (message.get("id"), message.get("method").and_then(Value::as_str))
    else {
        return next.run(request).await;
    };
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    let uri = message.pointer("/params/uri").and_then(Value::as_str).unwrap_or_default();
    let modern = request
        .headers()
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|version| version.trim() >= "2026-07-28");
    if let Some(contents) = super::documents::read(&core, &caller, uri).await {
        let mut result = json!({"contents": contents});
        if modern {
            result =
                json!({"resultType": "complete", "ttlMs": 0, "cacheScope": "private", "contents": contents});
        }
        return json_response(response_json(id, Ok(result)));
    }
    match open(&core, &caller, uri).await {
        Ok((output, bytes)) => streamed(id, uri, &output, bytes, modern),
        Err(error) => json_response(response_json(id, Err(error.for_revision(uri, modern)))),
    }
}

/// What `resources/read` answers for a URI that names nothing the caller
/// may read: `-32002` until 2025-11-25, `-32602` from 2026-07-28 (SEP-2164),
/// with the URI in `data` either way.
fn not_found(uri: &str) -> McpError {
    McpError::resource_not_found(format!("Resource not found: {uri:?}"), Some(json!({"uri": uri})))
}

trait ForRevision {
    fn for_revision(self, uri: &str, modern: bool) -> Self;
}

impl ForRevision for McpError {
    fn for_revision(self, uri: &str, modern: bool) -> Self {
        if modern && self.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
            McpError::invalid_params(self.message, Some(json!({"uri": uri})))
        } else {
            self
        }
    }
}

/// The caller's file `uri` names, opened; an error for every other URI.
async fn open(
    core: &Core,
    caller: &Caller,
    uri: &str,
) -> Result<(ToolOutput, impl Stream<Item = Result<Bytes, std::io::Error>> + Send + use<>), McpError> {
    let Some((task_id, name)) = tool_outputs::parse_resource_uri(uri) else { return Err(not_found(uri)) };
    let run = match core.find::<ToolRun>(caller, task_id).await {
        Ok(View::Found(run)) => run,
        Ok(View::NotGranted(why)) => return Err(McpError::invalid_request(why, None)),
        Ok(View::Missing | View::Unreadable(_)) => return Err(not_found(uri)),
        Err(why) => return Err(McpError::internal_error(why, None)),
    };
    let output = linked(&run, name).ok_or_else(|| not_found(uri))?;
    let Some(files) = &core.files else {
        return Err(McpError::internal_error("this install keeps no tool files (no --outputs-url)", None));
    };
    match files.open(&core.keys, &caller.digest, &run, &output).await {
        Ok(bytes) => Ok((output, bytes)),
        Err(ReadError::Missing) => Err(not_found(uri)),
        Err(ReadError::Busy { message, retry_after_seconds }) => Err(McpError::internal_error(
            format!("{message}; retry in {retry_after_seconds} s"),
            Some(json!({"retryAfterSeconds": retry_after_seconds})),
        )),
    }
}

/// The file `name` as the succeeded `run` links it (pure): what the
/// operator recorded, checked as an upload would be.
pub fn linked(run: &ToolRun, name: &str) -> Option<ToolOutput> {
    let outputs = run.status.as_ref().map(|s| s.outputs.as_slice()).unwrap_or_default();
    if run.phase() != ToolRunPhase::Succeeded || tool_outputs::check_recorded(outputs).is_err() {
        return None;
    }
    outputs.iter().find(|o| o.name == name).cloned()
}

/// The JSON-RPC response, written as the bytes arrive: the head, the bytes
/// in base64, the tail. A read that breaks off ends the body early, so the
/// client sees a truncated answer, never a wrong one.
fn streamed(
    id: &Value,
    uri: &str,
    output: &ToolOutput,
    bytes: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    modern: bool,
) -> Response {
    // 2026-07-28 results say their type and how long they may be cached
    // (a caller's own file: privately, not at all).
    let hints = if modern { r#""resultType":"complete","ttlMs":0,"cacheScope":"private","# } else { "" };
    let head = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{{hints}"contents":[{{"uri":{},"mimeType":{},"blob":""#,
        Value::from(uri),
        Value::from(output.media_type.as_str()),
    );
    let tail = Bytes::from_static(br#""}]}}"#);
    let body = futures::stream::once(async move { Ok(Bytes::from(head)) })
        .chain(base64_chunks(bytes))
        .chain(futures::stream::once(async move { Ok(tail) }));
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], Body::from_stream(body)).into_response()
}

/// `bytes` in standard base64, chunk by chunk (a remainder of up to two
/// bytes carried to the next chunk, padded at the end).
pub fn base64_chunks<E>(
    bytes: impl Stream<Item = Result<Bytes, E>> + Send,
) -> impl Stream<Item = Result<Bytes, E>> + Send {
    futures::stream::unfold(
        (Box::pin(bytes), Vec::<u8>::new(), false),
        |(mut bytes, mut carry, done)| async move {
            let engine = &base64::engine::general_purpose::STANDARD;
            if done {
                return None;
            }
            match bytes.next().await {
                Some(Ok(chunk)) => {
                    carry.extend_from_slice(&chunk);
                    let whole = carry.len() / 3 * 3;
                    let encoded = engine.encode(&carry[..whole]);
                    carry.drain(..whole);
                    Some((Ok(Bytes::from(encoded)), (bytes, carry, false)))
                }
                Some(Err(err)) => Some((Err(err), (bytes, carry, true))),
                None => Some((Ok(Bytes::from(engine.encode(&carry))), (bytes, Vec::new(), true))),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt as _;

    #[tokio::test]
    async fn base64_across_chunks_is_base64_of_the_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        for sizes in [vec![1usize], vec![2, 5], vec![3], vec![4, 1, 7], vec![1000]] {
            let mut chunks = Vec::new();
            let mut at = 0;
            let mut i = 0;
            while at < data.len() {
                let size = sizes[i % sizes.len()].min(data.len() - at);
                chunks.push(Ok::<_, std::io::Error>(Bytes::copy_from_slice(&data[at..at + size])));
                at += size;
                i += 1;
            }
            let encoded: Vec<Bytes> =
                base64_chunks(futures::stream::iter(chunks)).try_collect().await.unwrap();
            let expected = base64::engine::general_purpose::STANDARD.encode(&data);
            assert_eq!(String::from_utf8(encoded.concat()).unwrap(), expected, "chunk sizes {sizes:?}");
        }
    }

    fn run(phase: ToolRunPhase, names: &[&str]) -> ToolRun {
        mining_api::testing::tool_run_with_files(Some(phase), names)
    }

    #[test]
    fn only_a_succeeded_runs_recorded_files_are_served() {
        assert!(linked(&run(ToolRunPhase::Succeeded, &["a.csv"]), "a.csv").is_some());
        assert!(linked(&run(ToolRunPhase::Succeeded, &["a.csv"]), "b.csv").is_none());
        assert!(linked(&run(ToolRunPhase::Running, &["a.csv"]), "a.csv").is_none());
        assert!(linked(&run(ToolRunPhase::Failed, &["a.csv"]), "a.csv").is_none());
        // A status someone edited to list a name twice is served not at all.
        assert!(linked(&run(ToolRunPhase::Succeeded, &["a.csv", "a.csv"]), "a.csv").is_none());
    }
}
