//! The HTTP/1.1 server loop, bounded: at most `max_connections` at once, and
//! at most `max_connections_per_source` from one address, so one client can
//! never take the whole pool (one more is accepted, told 503 with
//! Retry-After, and closed at once, so the kernel's backlog never fills with
//! them), a request head must arrive whole within
//! `header_read_timeout` — which also closes a keep-alive connection idle
//! that long — and may not exceed `max_head_bytes`.
//!
//! `axum::serve` offers none of these, so a client that sends half a head
//! (or nothing) would hold its connection forever; authentication only runs
//! once the head is complete, so these are the limits an anonymous client
//! meets.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::Request;
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
    pub max_connections_per_source: usize,
    pub header_read_timeout: Duration,
    pub max_head_bytes: usize,
}

/// The address a request came from (a request extension), for budgets
/// that one client must not exhaust for others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source(pub IpAddr);

/// Open connections per source address, each bounded.
#[derive(Debug)]
pub struct SourceShares {
    limit: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its source's share, given back when dropped.
pub struct SourceShare {
    shares: Arc<SourceShares>,
    source: IpAddr,
}

impl SourceShares {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { limit, open: Mutex::new(HashMap::new()) })
    }

    /// A place for one more connection from `source`, unless it holds its share.
    pub fn take(self: &Arc<Self>, source: IpAddr) -> Option<SourceShare> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(source).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(SourceShare { shares: self.clone(), source })
    }

    /// Sources with a connection open (the map never keeps an idle one).
    pub fn sources(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for SourceShare {
    fn drop(&mut self) {
        let mut open = self.shares.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.source) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.source);
            }
        }
    }
}

/// The answer of a connection over a cap (its request is never read).
fn over_capacity(limit: usize, per_source: bool) -> String {
    let body = if per_source {
        format!(
            "Too many connections from one address: this server holds at most {limit} from each; \
             retry in 1 second\n"
        )
    } else {
        format!("Too many connections: this server holds at most {limit} at once; retry in 1 second\n")
    };
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
    let shares = SourceShares::new(limits.max_connections_per_source);
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // E.g. out of file descriptors: let some close first.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // The source's share first: a source at its share never takes a
        // place in the pool that others could use.
        let source = peer.ip().to_canonical();
        let admitted = match shares.take(source) {
            None => Err((limits.max_connections_per_source, true)),
            Some(share) => match permits.clone().try_acquire_owned() {
                Ok(permit) => Ok((share, permit)),
                Err(_) => Err((limits.max_connections, false)),
            },
        };
        let Ok((share, permit)) = admitted else {
            let (limit, per_source) = admitted.err().unwrap_or_default();
            if let Some(metrics) = &metrics {
                metrics.connections_refused.inc();
            }
            tracing::debug!(limit, per_source, "connection limit reached; closing a new connection");
            // Say which limit, in one non-blocking write: a refused
            // connection never holds a task or a buffer.
            let _ = stream.try_write(over_capacity(limit, per_source).as_bytes());
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router_service = router.clone().into_service::<Incoming>();
        let tagged = tower::ServiceExt::map_request(router_service, move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(Source(source));
            request
        });
        let service = TowerToHyperService::new(tagged);
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
            drop((permit, share));
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::info!(grace = ?SHUTDOWN_GRACE, "open requests did not end in time; stopping anyway");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_source_holds_at_most_its_share_and_gives_it_back() {
        let shares = SourceShares::new(2);
        let flood: IpAddr = "10.0.0.9".parse().unwrap();
        let caller: IpAddr = "10.0.0.7".parse().unwrap();
        let held: Vec<SourceShare> = (0..5).filter_map(|_| shares.take(flood)).collect();
        assert_eq!(held.len(), 2, "a source holds its share and no more");
        assert!(shares.take(caller).is_some(), "another source is not refused");
        drop(held);
        assert_eq!(shares.sources(), 0, "closed connections leave nothing behind");
        assert!(shares.take(flood).is_some());
    }

    #[test]
    fn refusals_say_which_cap() {
        assert!(over_capacity(7, true).contains("at most 7 from each"));
        assert!(over_capacity(9, false).contains("at most 9 at once"));
        assert!(over_capacity(9, false).contains("Connection: close\r\n"));
    }
}
