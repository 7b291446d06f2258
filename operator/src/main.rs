//! The operator binary: configuration, telemetry, the controller and a small
//! HTTP server for /metrics, /healthz and /readyz.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use clap::Parser;
use mining_operator::api_calls::{CountCalls, counted_client};
use mining_operator::config::Config;
use mining_operator::metrics::Metrics;
use mining_operator::{kinds, work};

#[derive(Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

async fn metrics(State(state): State<HttpState>) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
}

async fn ready(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // One TLS provider for the process, installed before any HTTP client is
    // built: the OTLP exporter's and the S3 client's reqwest find it here
    // (kube names its own). Fails only if one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Kept to the end of main: dropping it flushes the spans still buffered.
    let _telemetry = telemetry::init("mining-operator", "info,kube=warn");
    let config = Config::parse();
    // Read before anything starts: a key configured but unreadable is a
    // broken deployment, not a reason to trust every caller label.
    let keys = match &config.ownership_key_file {
        Some(current) => Some(
            mining_api::ownership::OwnershipKeys::from_files(
                current,
                config.previous_ownership_key_file.as_deref(),
            )
            .map_err(anyhow::Error::msg)?,
        ),
        None => {
            tracing::info!(
                "no --ownership-key-file: every workflow queues with its namespace's direct creators"
            );
            None
        }
    };
    // The outputs store, opened before anything starts: a store configured
    // but unreachable in its settings is a broken deployment.
    let outputs = match (&config.outputs.store, &keys) {
        (None, _) => None,
        (Some(_), None) => {
            anyhow::bail!("--outputs-store needs --ownership-key-file: upload tokens are derived from it")
        }
        (Some(url), Some(_)) => Some(Arc::new(
            mining_operator::outputs::Outputs::open(
                url,
                mining_operator::outputs::Limits::of(&config.outputs),
            )
            .map_err(anyhow::Error::msg)?,
        )),
    };
    let state = HttpState { metrics: Arc::new(Metrics::default()), ready: Arc::new(AtomicBool::new(false)) };
    let kube_config = kube::Config::infer().await.context("finding the Kubernetes API")?;
    let counter = CountCalls::new(state.metrics.api_calls.clone());
    let client = counted_client(kube_config, counter).context("connecting to the Kubernetes API")?;

    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding {}", config.http_addr))?;
    tracing::info!(addr = %config.http_addr, namespace = config.namespace.as_deref().unwrap_or("(all)"), image = %config.miner_image, "starting");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let registered = config.clone();
    let register = move |registry: &mut work::Registry| kinds::register(registry, &registered);
    work::run(client, config, keys, outputs, state.metrics, state.ready, register).await;
    server.abort();
    tracing::info!("stopped");
    Ok(())
}
