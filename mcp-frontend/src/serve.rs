//! The HTTP/1.1 server loop, bounded: at most `max_connections` at once (one
//! more is accepted, told 503 with Retry-After, and closed at once, so the
//! kernel's backlog never fills with them), a request head must arrive whole within
//! `header_read_timeout` — which also closes a keep-alive connection idle
//! that long — and may not exceed `max_head_bytes`.
//!
//! `axum::serve` offers none of these, so a client that sends half a head
//! (or nothing) would hold its connection forever; authentication only runs
//! once the head is complete, so these are the limits an anonymous client
//! meets.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::metrics::Metrics;

/// How long open requests (long waits, result streams) get to end after a
/// stop signal before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// hyper's smallest read buffer.
const MIN_HEAD_BYTES: usize = 8 * 1024;

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub max_head_bytes: usize,
}

/// The answer of a connection over the cap (its request is never read).
fn over_capacity(limit: usize) -> String {
    let body =
        format!("Too many connections: this server holds at most {limit} at once; retry in 1 second\n");
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Serves `router` on `listener` until `stop` resolves, then lets open
/// requests finish for a while.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    metrics: Option<Arc<Metrics>>,
    stop: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_head_bytes.max(MIN_HEAD_BYTES));
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut stop = std::pin::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // E.g. out of file descriptors: let some close first.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            if let Some(metrics) = &metrics {
                metrics.connections_refused.inc();
            }
            tracing::debug!(
                limit = limits.max_connections,
                "connection limit reached; closing a new connection"
            );
            // Say which limit, in one non-blocking write: a refused
            // connection never holds a task or a buffer.
            let _ = stream.try_write(over_capacity(limits.max_connections).as_bytes());
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone().into_service::<Incoming>());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let open = metrics.clone();
        tokio::spawn(async move {
            if let Some(metrics) = &open {
                metrics.connections_open.inc();
            }
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "connection ended with an error");
            }
            if let Some(metrics) = &open {
                metrics.connections_open.dec();
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::info!(grace = ?SHUTDOWN_GRACE, "open requests did not end in time; stopping anyway");
    }
}
