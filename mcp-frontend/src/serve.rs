//! The HTTP/1.1 server loop, bounded: at most `max_connections` at once, and
//! at most `max_connections_per_source` from one address that is not a
//! trusted proxy, where idle connections that never carried an
//! authenticated request give way to newcomers (see [`crate::connections`]);
//! a connection no place can be made for is told 503 with Retry-After and
//! closed at once, so the kernel's backlog never fills with them; a request
//! head must arrive whole within
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

use crate::connections::{Connections, PoolLimits, Refused};
use crate::metrics::Metrics;

/// How long open requests (long waits, result streams) get to end after a
/// stop signal before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// hyper's smallest read buffer.
const MIN_HEAD_BYTES: usize = 8 * 1024;

/// The bounds of one listener.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub pool: PoolLimits,
    pub header_read_timeout: Duration,
    pub max_head_bytes: usize,
}

/// The client a request came from (a request extension): its TCP peer, or
/// behind a trusted proxy the address the proxy forwarded. For budgets that
/// one client must not exhaust for others.
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
fn over_capacity(refused: Refused) -> String {
    let body = match refused {
        Refused::PerSource(limit) => format!(
            "Too many connections from one address: this server holds at most {limit} from each, and all \
             of them are serving or have served authenticated requests; retry in 1 second\n"
        ),
        Refused::Total(limit) => format!(
            "Too many connections: this server holds at most {limit} at once, and all of them are serving \
             or have served authenticated requests; retry in 1 second\n"
        ),
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
    let connections = Connections::new(limits.pool.clone());
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
        let place = match connections.admit(peer.ip()) {
            Ok(place) => place,
            Err(refused) => {
                if let Some(metrics) = &metrics {
                    metrics.connections_refused.inc();
                }
                tracing::debug!(?refused, "connection limit reached; closing a new connection");
                // Say which limit, in one non-blocking write: a refused
                // connection never holds a task or a buffer.
                let _ = stream.try_write(over_capacity(refused).as_bytes());
                drop(stream);
                continue;
            }
        };
        if let Some(metrics) = metrics.as_ref().filter(|_| place.displaced > 0) {
            metrics.connections_displaced.inc_by(place.displaced as u64);
        }
        let _ = stream.set_nodelay(true);
        let handle = place.handle();
        let (router, trusted) = (router.clone(), connections.clone());
        // Each request: marked busy while served (a busy connection never
        // gives way), tagged with its client and its connection.
        let service = tower::service_fn(move |mut request: Request<Incoming>| {
            let busy = handle.busy();
            let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
            let client =
                trusted.trusted_proxies().client(peer.ip(), header("forwarded"), header("x-forwarded-for"));
            request.extensions_mut().insert(Source(client));
            request.extensions_mut().insert(handle.clone());
            let answer = tower::ServiceExt::oneshot(router.clone(), request);
            async move {
                let response = answer.await;
                drop(busy);
                response
            }
        });
        let service = TowerToHyperService::new(service);
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let open = metrics.clone();
        tokio::spawn(async move {
            if let Some(metrics) = &open {
                metrics.connections_open.inc();
            }
            tokio::select! {
                ended = connection => if let Err(err) = ended {
                    tracing::debug!(error = %err, "connection ended with an error");
                },
                // An idle connection that never carried an authenticated
                // request, closed to make room for a newcomer.
                () = place.evicted.cancelled() => {}
            }
            if let Some(metrics) = &open {
                metrics.connections_open.dec();
            }
            drop(place);
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
        assert!(over_capacity(Refused::PerSource(7)).contains("at most 7 from each"));
        assert!(over_capacity(Refused::Total(9)).contains("at most 9 at once"));
        assert!(over_capacity(Refused::Total(9)).contains("Connection: close\r\n"));
    }
}
