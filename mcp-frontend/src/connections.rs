//! The connections of one listener, bounded so that an anonymous client
//! never costs real callers their calls, wherever they connect from.
//!
//! Before a request is authenticated nothing is known of a client but its
//! TCP peer, and behind a Service proxy, an Ingress or a load balancer many
//! clients share one. So the bounds do not refuse a newcomer for what
//! others hold: a connection that has never carried an authenticated
//! request, and is not serving one now, gives its place to a new
//! connection when the pool (or its peer's share) is full — the oldest such
//! first. A client holding a thousand idle connections holds them only until
//! somebody else connects. Connections that have carried an authenticated
//! call keep theirs — unless one caller holds more of them than any other:
//! when nothing unproven is idle, an idle connection of the caller holding
//! the most gives way (never a caller's last), so a caller spreading keep-
//! alive connections over many addresses cannot hold the pool (red team,
//! round 5). Only when every place is held by busy connections or by
//! callers' last ones is a newcomer refused, told which limit and when to
//! retry.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use crate::proxies::TrustedProxies;

/// The bounds of the pool.
#[derive(Debug, Clone)]
pub struct PoolLimits {
    pub max_connections: usize,
    /// From one peer that is not a trusted proxy (a proxy carries many clients).
    pub max_connections_per_source: usize,
    pub trusted_proxies: TrustedProxies,
}

/// Which limit refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    PerSource(usize),
    Total(usize),
}

#[derive(Debug)]
struct Open {
    peer: IpAddr,
    /// Counted in its peer's share (its peer is not a trusted proxy).
    shared: bool,
    /// The caller (digest) whose authenticated request it carried, if any.
    proven: Option<String>,
    /// Requests being served on it now.
    busy: usize,
    evict: CancellationToken,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    /// By id, so the oldest first.
    open: BTreeMap<u64, Open>,
    per_source: HashMap<IpAddr, usize>,
}

impl Table {
    /// The oldest connection that may give way (of `peer` only, when
    /// given): an idle one never proven, else an idle one of the caller
    /// holding the most proven connections (of `peer`), when that caller
    /// holds more than one.
    fn victim(&self, peer: Option<IpAddr>) -> Option<u64> {
        let of_peer = |open: &&Open| peer.is_none_or(|peer| open.peer == peer);
        let unproven =
            self.open.iter().find(|(_, open)| open.proven.is_none() && open.busy == 0 && of_peer(open));
        if let Some((id, _)) = unproven {
            return Some(*id);
        }
        let mut held: HashMap<&str, usize> = HashMap::new();
        for open in self.open.values().filter(|open| of_peer(open)) {
            if let Some(caller) = &open.proven {
                *held.entry(caller.as_str()).or_default() += 1;
            }
        }
        let idle_of = |caller: &str| {
            self.open
                .iter()
                .find(|(_, open)| open.busy == 0 && of_peer(open) && open.proven.as_deref() == Some(caller))
        };
        let mut heaviest: Vec<(&str, usize)> = held.into_iter().filter(|(_, count)| *count > 1).collect();
        heaviest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        heaviest.into_iter().find_map(|(caller, _)| idle_of(caller)).map(|(id, _)| *id)
    }

    fn remove(&mut self, id: u64) -> Option<Open> {
        let open = self.open.remove(&id)?;
        if open.shared
            && let Some(count) = self.per_source.get_mut(&open.peer)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_source.remove(&open.peer);
            }
        }
        Some(open)
    }
}

/// The open connections of one listener.
#[derive(Debug)]
pub struct Connections {
    limits: PoolLimits,
    table: Mutex<Table>,
}

/// One admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct Place {
    handle: ConnectionHandle,
    /// Cancelled when the connection must give its place to a newer one.
    pub evicted: CancellationToken,
    /// How many idle, unproven connections gave way for this one.
    pub displaced: usize,
}

/// A connection, as its requests see it (a request extension).
#[derive(Debug, Clone)]
pub struct ConnectionHandle {
    connections: Arc<Connections>,
    id: u64,
}

/// A request being served; dropping it ends it.
pub struct Busy(ConnectionHandle);

impl Connections {
    pub fn new(limits: PoolLimits) -> Arc<Self> {
        Arc::new(Self { limits, table: Mutex::new(Table::default()) })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Counters and tokens only: a panic elsewhere leaves them usable.
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn trusted_proxies(&self) -> &TrustedProxies {
        &self.limits.trusted_proxies
    }

    /// A place for a new connection from `peer`: within the pool and, for a
    /// peer that is not a trusted proxy, within its share — made, when
    /// full, by closing the oldest idle connection that never carried an
    /// authenticated request, else an idle one of the caller holding the
    /// most (of the same peer when its share is full).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Place, Refused> {
        let peer = peer.to_canonical();
        let shared = !self.limits.trusted_proxies.contains(peer);
        let mut table = self.lock();
        let mut displaced = 0;
        if shared
            && table.per_source.get(&peer).copied().unwrap_or(0) >= self.limits.max_connections_per_source
        {
            let victim = table.victim(Some(peer));
            let open = victim.and_then(|id| table.remove(id));
            let Some(open) = open else {
                return Err(Refused::PerSource(self.limits.max_connections_per_source));
            };
            open.evict.cancel();
            displaced += 1;
        }
        if table.open.len() >= self.limits.max_connections {
            let victim = table.victim(None);
            let open = victim.and_then(|id| table.remove(id));
            let Some(open) = open else { return Err(Refused::Total(self.limits.max_connections)) };
            open.evict.cancel();
            displaced += 1;
        }
        let id = table.next_id;
        table.next_id += 1;
        let evicted = CancellationToken::new();
        table.open.insert(id, Open { peer, shared, proven: None, busy: 0, evict: evicted.clone() });
        if shared {
            *table.per_source.entry(peer).or_default() += 1;
        }
        Ok(Place { handle: ConnectionHandle { connections: self.clone(), id }, evicted, displaced })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Peers holding a share now (the map never keeps an idle one).
    pub fn sources(&self) -> usize {
        self.lock().per_source.len()
    }
}

impl Place {
    pub fn handle(&self) -> ConnectionHandle {
        self.handle.clone()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.handle.connections.lock().remove(self.handle.id);
    }
}

impl ConnectionHandle {
    /// The connection carried a request authenticated as `caller` (its
    /// digest): it keeps its place, within that caller's fair part.
    pub fn prove(&self, caller: &str) {
        if let Some(open) = self.connections.lock().open.get_mut(&self.id) {
            open.proven = Some(caller.to_string());
        }
    }

    /// A request is being served on the connection until the guard drops.
    pub fn busy(&self) -> Busy {
        if let Some(open) = self.connections.lock().open.get_mut(&self.id) {
            open.busy += 1;
        }
        Busy(self.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(open) = self.0.connections.lock().open.get_mut(&self.0.id) {
            open.busy = open.busy.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(total: usize, per_source: usize, trusted: &str) -> Arc<Connections> {
        Connections::new(PoolLimits {
            max_connections: total,
            max_connections_per_source: per_source,
            trusted_proxies: TrustedProxies::parse(trusted).unwrap(),
        })
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn idle_anonymous_connections_give_way_to_newcomers_of_the_same_address() {
        let connections = pool(10, 3, "");
        let shared = ip("10.0.0.1");
        let flood: Vec<Place> = (0..3).map(|_| connections.admit(shared).unwrap()).collect();
        // A caller behind the same address (a Service proxy) still gets in.
        let caller = connections.admit(shared).unwrap();
        assert_eq!(caller.displaced, 1);
        assert!(flood[0].evicted.is_cancelled(), "the oldest idle one gave way");
        assert!(!flood[1].evicted.is_cancelled() && !flood[2].evicted.is_cancelled());
        assert_eq!(connections.open(), 3);
    }

    #[test]
    fn proven_and_busy_connections_keep_their_place_and_refusals_name_the_limit() {
        let connections = pool(3, 3, "");
        let peer = ip("10.0.0.1");
        let proven = connections.admit(peer).unwrap();
        proven.handle().prove("alice");
        let busy = connections.admit(peer).unwrap();
        let _serving = busy.handle().busy();
        let idle = connections.admit(peer).unwrap();
        let newcomer = connections.admit(ip("10.0.0.2")).unwrap();
        assert!(
            idle.evicted.is_cancelled() && !proven.evicted.is_cancelled() && !busy.evicted.is_cancelled()
        );
        newcomer.handle().prove("bob");
        assert_eq!(connections.admit(ip("10.0.0.3")).unwrap_err(), Refused::Total(3));
        assert_eq!(connections.admit(peer).unwrap_err(), Refused::Total(3));
        drop(newcomer);
        assert!(connections.admit(ip("10.0.0.3")).is_ok(), "a closed connection frees its place");
    }

    #[test]
    fn a_share_full_of_proven_connections_refuses_its_own_peer_only() {
        let connections = pool(10, 2, "");
        let peer = ip("10.0.0.1");
        let held: Vec<Place> = (0..2).map(|_| connections.admit(peer).unwrap()).collect();
        held.iter().enumerate().for_each(|(i, place)| place.handle().prove(&format!("caller-{i}")));
        assert_eq!(connections.admit(peer).unwrap_err(), Refused::PerSource(2));
        assert!(connections.admit(ip("10.0.0.2")).is_ok(), "another peer is not refused");
    }

    #[test]
    fn a_trusted_proxy_has_no_share_of_its_own_and_closed_connections_leave_nothing() {
        let connections = pool(5, 1, "10.9.0.0/16");
        let proxy = ip("10.9.0.1");
        let places: Vec<Place> = (0..5).map(|_| connections.admit(proxy).unwrap()).collect();
        assert_eq!(connections.sources(), 0, "a proxy carries many clients: no per-peer share");
        drop(places);
        assert_eq!(connections.open(), 0);
        let one = connections.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(connections.sources(), 1);
        drop(one);
        assert_eq!(connections.sources(), 0);
    }

    #[test]
    fn one_caller_holding_proven_connections_gives_way_to_others() {
        // Red team round 5: one caller's 80 connections from 4 addresses,
        // each proven by one authenticated ping and kept alive, left no
        // place for anyone.
        let connections = pool(8, 2, "");
        let flood: Vec<Place> = (0..8)
            .map(|i| {
                let place = connections.admit(ip(&format!("10.0.0.{}", i / 2 + 1))).unwrap();
                place.handle().prove("bob");
                place
            })
            .collect();
        let alice = connections.admit(ip("10.0.1.1")).expect("a newcomer gets in");
        assert_eq!(alice.displaced, 1);
        assert!(flood[0].evicted.is_cancelled(), "bob's oldest idle connection gave way");
        alice.handle().prove("alice");
        let _busy = flood[1].handle().busy();
        let carol = connections.admit(ip("10.0.2.1")).expect("and another");
        assert!(flood[2].evicted.is_cancelled(), "bob's oldest idle one again; a busy one is kept");
        assert!(!flood[1].evicted.is_cancelled() && !alice.evicted.is_cancelled());
        drop(carol);
        // A caller's last connection is never taken: with one each, a full pool refuses.
        let small = pool(2, 2, "");
        let (one, two) = (small.admit(ip("10.0.0.1")).unwrap(), small.admit(ip("10.0.0.2")).unwrap());
        one.handle().prove("alice");
        two.handle().prove("bob");
        assert_eq!(small.admit(ip("10.0.0.3")).unwrap_err(), Refused::Total(2));
    }
}
