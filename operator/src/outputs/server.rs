//! The outputs server: tool Pods `PUT` their files, the frontend `GET`s
//! them. Separate from /metrics so a NetworkPolicy can open it to tool Pods
//! and the frontend alone.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use kube::runtime::reflector::{ObjectRef, Store};
use mining_api::ToolRun;
use mining_api::Work as _;
use mining_api::ownership::OwnershipKeys;

use super::{Outputs, Refusal};

/// Longest a read token may be valid for from now.
const MAX_READ_TOKEN_SECONDS: u64 = 3600;

struct Served {
    outputs: Arc<Outputs>,
    keys: OwnershipKeys,
    runs: Store<ToolRun>,
}

/// Serves uploads and reads on `addr` until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    outputs: Arc<Outputs>,
    keys: OwnershipKeys,
    runs: Store<ToolRun>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving tool outputs");
    serve_on(listener, outputs, keys, runs).await
}

/// [`serve`] on a listener already bound.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    outputs: Arc<Outputs>,
    keys: OwnershipKeys,
    runs: Store<ToolRun>,
) -> std::io::Result<()> {
    let state = Arc::new(Served { outputs, keys, runs });
    let app = Router::new()
        .route("/v1/outputs/{namespace}/{run}/{uid}/{file}", put(upload).get(read))
        .with_state(state);
    axum::serve(listener, app).await
}

type RunFile = (String, String, String, String);

async fn upload(
    State(served): State<Arc<Served>>,
    UrlPath((namespace, run, uid, file)): UrlPath<RunFile>,
    request: Request,
) -> Response {
    let ids = [namespace.as_str(), run.as_str(), uid.as_str()];
    let token = bearer(request.headers()).unwrap_or_default();
    if !served.keys.proves_outputs_upload(ids, token) {
        return refused(Refusal::new(401, "not this run's upload token (MCP_OUTPUTS_TOKEN)"));
    }
    // Only while the run runs: a finished run's files are what it recorded.
    let found = served
        .runs
        .get(&ObjectRef::new(&run).within(&namespace))
        .filter(|r| r.metadata.uid.as_deref() == Some(uid.as_str()) && !r.is_finished());
    let Some(found) = found else {
        return refused(Refusal::new(409, "the run is not running: it takes no more files"));
    };
    let party = party_of(&served.keys, &found);
    let content_type =
        request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = request.into_body().into_data_stream();
    match served.outputs.upload(ids, &party, &file, content_type.as_deref(), body).await {
        Ok(output) => {
            tracing::info!(namespace = %namespace, run = %run, file = %output.name, bytes = output.size, "stored a tool output");
            let json = serde_json::to_string(&output).unwrap_or_default();
            (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], json).into_response()
        }
        Err(refusal) => refused(refusal),
    }
}

async fn read(
    State(served): State<Arc<Served>>,
    UrlPath((namespace, run, uid, file)): UrlPath<RunFile>,
    request: Request,
) -> Response {
    let expires = request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("expires="))
        .and_then(|v| v.parse::<u64>().ok());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let token = bearer(request.headers()).unwrap_or_default();
    let valid = expires.is_some_and(|expires| {
        expires >= now
            && expires <= now + MAX_READ_TOKEN_SECONDS
            && served.keys.proves_outputs_read([&namespace, &run, &uid], &file, expires, token)
    });
    if !valid {
        return refused(Refusal::new(401, "not a valid read token for this file"));
    }
    match served.outputs.read(&namespace, &uid, &file).await {
        Ok((output, bytes)) => {
            let mut response = Response::new(Body::from_stream(bytes));
            let headers = response.headers_mut();
            if let Ok(value) = HeaderValue::from_str(&output.media_type) {
                headers.insert(header::CONTENT_TYPE, value);
            }
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(output.size));
            if let Ok(value) = HeaderValue::from_str(&output.sha256) {
                headers.insert("x-content-sha256", value);
            }
            response
        }
        Err(refusal) => refused(refusal),
    }
}

/// Whose share a run's files count against: its caller's when the
/// frontend's proof says so, else the one party of every unproven run.
pub fn party_of(keys: &OwnershipKeys, run: &ToolRun) -> String {
    match run.caller_label() {
        Some(label) if keys.proves(run) => label.to_string(),
        _ => String::new(),
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

fn refused(refusal: Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (status, format!("{}\n", refusal.message)).into_response();
    if let Some(seconds) = refusal.retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}
