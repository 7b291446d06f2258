//! The HTTP edge: `/mcp` (rmcp's Streamable HTTP service behind the auth
//! middleware) on the MCP listener, and `/healthz`, `/readyz` and `/metrics`
//! on a listener of their own, so a NetworkPolicy can open one without the
//! other.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::model::ErrorCode;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::auth::metadata::{MCP_PATH, metadata_router};
use crate::auth::{AuthLayerState, require_caller};
use crate::core::Core;
use crate::faces::JsonBody;
use crate::faces::listen_2026::{ListenState, answer_listens};
use crate::faces::mcp_tools::McpServer;
use crate::faces::resources::answer_resources;
use crate::faces::tasks_2025::answer_core_tasks;
use crate::faces::tasks_2026::mirror_task_id_header;
use crate::host_guard::{HostGuard, guard_host_and_origin};
use crate::metrics::Metrics;

/// Longest a request body may take to arrive.
const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Host names always accepted (rmcp's defaults: loopback only).
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

pub struct HttpOptions {
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub max_request_bytes: usize,
    pub shutdown: CancellationToken,
}

#[derive(Clone)]
struct Health {
    core: Arc<Core>,
    catalog: Arc<crate::tool_runs::catalog::ToolCatalog>,
    metrics: Arc<Metrics>,
}

async fn metrics(State(health): State<Health>) -> ([(&'static str, &'static str); 1], String) {
    (
        [("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        health.metrics.encode(),
    )
}

/// Ready once every cache answers are served from has synced: a replica
/// without its tool catalog would list no defined tool, one without its
/// run cache would answer "not found" for runs that exist.
async fn ready(State(health): State<Health>) -> (StatusCode, String) {
    if let Some(kind) = health.core.kinds.unsynced() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("the {kind} cache has not synced yet\n"));
    }
    if !health.catalog.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "the McpTool catalog has not synced yet\n".into());
    }
    (StatusCode::OK, "ok\n".into())
}

/// The probes and metrics (for the kubelet and scrapers, never for callers).
pub fn ops_router(core: &Arc<Core>) -> Router {
    let health = Health { core: core.clone(), catalog: core.catalog.clone(), metrics: core.metrics.clone() };
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .with_state(health)
}

/// The MCP router. Stateless for every protocol version: any replica can
/// answer any request, and a restart loses nothing but open waits.
pub fn mcp_router(core: Arc<Core>, auth: Arc<AuthLayerState>, options: HttpOptions) -> Router {
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect();
    hosts.extend(options.allowed_hosts.iter().filter(|h| !h.is_empty()).cloned());
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_allowed_hosts(hosts.clone())
        .with_max_request_body_bytes(options.max_request_bytes)
        .with_cancellation_token(options.shutdown.child_token());
    let origins: Vec<&String> = options.allowed_origins.iter().filter(|o| !o.is_empty()).collect();
    if !origins.is_empty() {
        config = config.with_allowed_origins(origins.clone());
    }
    let guard = Arc::new(HostGuard {
        allowed_hosts: hosts.clone(),
        allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
    });
    let listens = ListenState { core: core.clone(), stopping: options.shutdown.clone() };
    // Shared state is built once, outside the per-request factory.
    let factory_core = core.clone();
    let service = StreamableHttpService::new(
        move || Ok(McpServer::new(factory_core.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let metadata = match &auth.resource {
        Some(resource) => metadata_router(resource.clone()),
        None => Router::new(),
    };
    Router::new()
        .route_service(MCP_PATH, service)
        .route_layer(middleware::from_fn(mirror_task_id_header))
        .route_layer(middleware::from_fn_with_state(listens, answer_listens))
        .route_layer(middleware::from_fn_with_state(core.clone(), answer_resources))
        .route_layer(middleware::from_fn_with_state(core, answer_core_tasks))
        .route_layer(middleware::from_fn_with_state(options.max_request_bytes, reject_unparseable_json))
        .route_layer(middleware::from_fn_with_state(auth, require_caller))
        // The metadata is public: outside the auth layer, behind the host guard.
        .merge(metadata)
        .route_layer(middleware::from_fn_with_state(guard, guard_host_and_origin))
}

/// Answers a POST body that is not JSON with JSON-RPC's parse error (-32700),
/// as the JSON-RPC spec asks, and a batch (an array) with -32600, instead of
/// a bare HTTP error; larger bodies than the limit get 413 without being
/// read further.
async fn reject_unparseable_json(State(limit): State<usize>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    // rmcp refuses versions it does not speak; an empty header it would take
    // for none at all (and so for 2025-03-26), which no client means by it.
    if request.headers().get("mcp-protocol-version").is_some_and(|v| v.as_bytes().trim_ascii().is_empty()) {
        return (StatusCode::BAD_REQUEST, "Bad Request: the MCP-Protocol-Version header is empty\n")
            .into_response();
    }
    let (parts, body) = request.into_parts();
    // A body that trickles in must not hold the connection (and its slot).
    let bytes = match tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        Err(_) => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                format!("Request Timeout: the body did not arrive within {BODY_READ_TIMEOUT:?}\n"),
            )
                .into_response();
        }
        Ok(Err(_)) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("Payload Too Large: request body exceeds {limit} bytes\n"),
            )
                .into_response();
        }
    };
    // MCP dropped JSON-RPC batches (2025-06-18); say so instead of rmcp's
    // bare "unrecognized message".
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        let error = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": ErrorCode::INVALID_REQUEST.0, "message": "Invalid Request: JSON-RPC batches are not \
                supported (MCP removed them in 2025-06-18); send one request per POST"},
        });
        return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/json")], error.to_string())
            .into_response();
    }
    let message = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(message) => message,
        Err(err) => {
            let error = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": ErrorCode::PARSE_ERROR.0, "message": format!("Parse error: the body is not JSON ({err})")},
            });
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "application/json")],
                error.to_string(),
            )
                .into_response();
        }
    };
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.extensions_mut().insert(JsonBody(Arc::new(message)));
    next.run(request).await
}
