//! The mcp-frontend binary: configuration, telemetry, the workflow cache and
//! the HTTP server; everything else lives in the library.

use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use kube::api::Api;
use mcp_frontend::auth::fetch::JsonFetcher;
use mcp_frontend::auth::jwks::{KeyCache, KeySource};
use mcp_frontend::auth::{
    AuthLayerState, Authenticator, KubernetesReviews, OidcVerifier, ProtectedResource, TokenFile,
};
use mcp_frontend::config::{AuthMode, Config};
use mcp_frontend::connections::PoolLimits;
use mcp_frontend::core::{Core, Kinds, WaitSlots};
use mcp_frontend::http::{HttpOptions, mcp_router, ops_router};
use mcp_frontend::metrics::Metrics;
use mcp_frontend::operator_presence::OperatorWatch;
use mcp_frontend::ownership::OwnershipKeys;
use mcp_frontend::quota::Quotas;
use mcp_frontend::serve::{ConnectionLimits, serve};
use mcp_frontend::tool_runs::access::{Grantor, ToolAccess, ToolGrants};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Kept to the end of main: dropping it flushes the spans still buffered.
    let _telemetry = telemetry::init("mcp-frontend", "info,kube=warn,rmcp=warn");
    let config = Config::parse();
    let limits = config.limits().map_err(anyhow::Error::msg)?;
    let client = kube::Client::try_default().await.context("connecting to the Kubernetes API")?;
    let namespace = config.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let metrics = Arc::new(Metrics::default());

    let token_policy = config.token_policy().map_err(anyhow::Error::msg)?;
    let mut resource = None;
    let authenticator = match config.auth {
        AuthMode::None => {
            tracing::warn!(
                "AUTHENTICATION IS OFF (--auth none): anyone who reaches this server can mine as one shared \
                 caller; use --auth kubernetes, oidc or tokens on any shared network"
            );
            Authenticator::None
        }
        AuthMode::Tokens => {
            let path = config.tokens_file.clone().context("--auth tokens needs --tokens-file")?;
            Authenticator::Tokens(TokenFile::open(path).map_err(anyhow::Error::msg)?)
        }
        AuthMode::Kubernetes => Authenticator::Kubernetes(Arc::new(KubernetesReviews::new(
            client.clone(),
            &namespace,
            config.previous_namespace.as_deref(),
            config.token_audiences.clone(),
            std::time::Duration::from_secs(u64::from(config.auth_cache_seconds)),
        ))),
        AuthMode::Oidc => {
            let policy = token_policy.context("--auth oidc needs --oidc-issuer and --oidc-audience")?;
            let source = if config.oidc_kubernetes_keys {
                KeySource::Kubernetes { client: client.clone() }
            } else {
                let fetcher = JsonFetcher::new(config.oidc_ca_file.as_deref()).map_err(anyhow::Error::msg)?;
                KeySource::Discovery { issuer: policy.issuer.clone(), fetcher: Box::new(fetcher) }
            };
            resource = Some(Arc::new(ProtectedResource {
                public_url: config.public_url.clone(),
                authorization_servers: vec![policy.issuer.clone()],
                scopes: policy.required_scopes.clone(),
            }));
            tracing::info!(issuer = %policy.issuer, audiences = ?policy.audiences, scopes = ?policy.required_scopes,
                caller_claim = %policy.caller_claim, "accepting JWT access tokens");
            let verifier = OidcVerifier::new(policy, KeyCache::new(source));
            verifier.prefetch().await;
            Authenticator::Oidc(Box::new(verifier))
        }
    };

    let grantor = match (&authenticator, &config.tool_grants) {
        (Authenticator::Kubernetes(reviews), None) => Grantor::Rbac(reviews.clone()),
        (Authenticator::Kubernetes(_), Some(_)) => {
            anyhow::bail!(
                "--tool-grants is for --auth oidc, tokens or none; with --auth kubernetes RBAC grants tools"
            )
        }
        (_, Some(path)) => Grantor::Listed(ToolGrants::read(path).map_err(anyhow::Error::msg)?),
        (_, None) => Grantor::Listed(ToolGrants::default()),
    };
    let access = Arc::new(ToolAccess::new(
        config.tool_access,
        grantor,
        std::time::Duration::from_secs(u64::from(config.auth_cache_seconds)),
    ));

    let previous_namespace = config.previous_namespace.as_deref();
    let (kinds, fills) = Kinds::start(&client, &namespace, previous_namespace, &metrics);
    let cache_tasks: Vec<_> = fills.into_iter().map(tokio::spawn).collect();
    let keys =
        OwnershipKeys::from_files(&config.ownership_key_file, config.previous_ownership_key_file.as_deref())
            .map_err(anyhow::Error::msg)?;
    let operator = match &config.operator_lease {
        Some((lease_namespace, lease)) => OperatorWatch::spawn(
            Api::namespaced(client.clone(), lease_namespace),
            lease.clone(),
            metrics.clone(),
        ),
        None => OperatorWatch::unknown(),
    };
    let product_namespace = config
        .product_namespace
        .clone()
        .or_else(|| config.operator_lease.as_ref().map(|(namespace, _)| namespace.clone()));
    let audit_task = (config.audit_interval_seconds > 0).then(|| {
        tokio::spawn(mcp_frontend::reach_watch::watch(
            client.clone(),
            namespace.clone(),
            product_namespace.unwrap_or_default(),
            std::time::Duration::from_secs(u64::from(config.audit_interval_seconds)),
            metrics.clone(),
        ))
    });
    let (catalog, run_catalog) = mcp_frontend::tool_runs::catalog::ToolCatalog::new(
        Api::namespaced(client.clone(), &namespace),
        mcp_frontend::kube_calls::server_features(&client).await,
        metrics.clone(),
    );
    tokio::spawn(run_catalog);
    let core = Arc::new(Core {
        files: config
            .outputs_url
            .as_deref()
            .map(|url| mcp_frontend::run_files::RunFiles::new(url, config.max_file_reads as usize)),
        catalog,
        access,
        kinds,
        operator,
        keys: Arc::new(keys),
        namespace: namespace.clone(),
        tools: limits.tools(),
        limits,
        quotas: Quotas {
            max_running: config.max_running_per_caller,
            max_starts_per_minute: config.max_starts_per_minute,
        },
        ledgers: Api::namespaced(client, config.ledger_namespace.as_deref().unwrap_or(&namespace)),
        metrics: metrics.clone(),
        default_ttl_seconds: config.default_ttl_seconds,
        task_list_page_size: config.task_list_page_size as usize,
        task_result_wait: std::time::Duration::from_secs(u64::from(config.task_result_wait_seconds)),
        waits: WaitSlots::new(config.max_waits_per_caller as usize, config.max_waits as usize),
        listens: WaitSlots::new(config.max_listens_per_caller as usize, config.max_listens as usize),
    });
    let reprover = core.clone();
    let reprove_task = tokio::spawn(async move { reprover.reprove_forever().await });
    let shutdown = CancellationToken::new();
    let auth = Arc::new(AuthLayerState { authenticator, resource, metrics: metrics.clone() });
    let options = HttpOptions {
        allowed_hosts: config.allowed_hosts.clone(),
        allowed_origins: config.allowed_origins.clone(),
        max_request_bytes: config.max_request_bytes as usize,
        shutdown: shutdown.clone(),
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let ops_listener = tokio::net::TcpListener::bind(config.metrics_listen)
        .await
        .with_context(|| format!("binding {}", config.metrics_listen))?;
    tracing::info!(addr = %config.listen, metrics = %config.metrics_listen, %namespace, auth = ?config.auth,
        "serving MCP at /mcp");
    let limits = ConnectionLimits {
        pool: PoolLimits {
            max_connections: config.max_connections as usize,
            max_connections_per_source: config.max_connections_per_source as usize,
            trusted_proxies: config.trusted_proxies.clone(),
        },
        header_read_timeout: std::time::Duration::from_secs(u64::from(config.header_read_timeout_seconds)),
        max_head_bytes: MAX_HEAD_BYTES,
    };
    // Probes and scrapes are few and trusted: a small fixed bound.
    let ops_pool = PoolLimits {
        max_connections: 64,
        max_connections_per_source: 64,
        trusted_proxies: Default::default(),
    };
    let ops_limits = ConnectionLimits { pool: ops_pool, ..limits.clone() };
    let ops = serve(ops_listener, ops_router(&core), ops_limits, None, shutdown.clone().cancelled_owned());
    let stopping = shutdown.clone();
    let mcp = serve(listener, mcp_router(core, auth, options), limits, Some(metrics), async move {
        stop_signal().await;
        tracing::info!("stopping");
        stopping.cancel();
    });
    tokio::join!(mcp, ops);
    for task in cache_tasks {
        task.abort();
    }
    reprove_task.abort();
    if let Some(task) = audit_task {
        task.abort();
    }
    Ok(())
}

/// Largest request head (request line and headers) accepted.
const MAX_HEAD_BYTES: usize = 32 * 1024;

/// SIGTERM (Kubernetes) or Ctrl-C.
async fn stop_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match terminate.as_mut() {
                Some(signal) => { signal.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}
