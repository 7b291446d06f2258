//! Who holds the slots and who waits, for the metrics (pure): counts by
//! kind and party class, the namespaces holding most, and how long the
//! longest-waiting party that holds no slot has waited — the figure the
//! fair-share alert watches.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::{Budget, Holdings, Limit, Seen, WorkKind, holds_slot, namespace_of, party_of, waiting};

/// The party classes metrics tell apart (a bounded label: never a caller's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PartyClass {
    /// An MCP caller, proven by the frontend.
    Caller,
    /// A namespace's direct creators.
    Direct,
}

impl PartyClass {
    pub fn of(seen: &Seen) -> Self {
        if party_of(seen).is_empty() { Self::Direct } else { Self::Caller }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Caller => "mcp-caller",
            Self::Direct => "direct",
        }
    }
}

/// The namespace label for the slots of every namespace past the top ones.
pub const OTHER_NAMESPACES: &str = "(other)";

#[derive(Debug, Default, PartialEq)]
pub struct Shares {
    /// Slots held, by kind and party class.
    pub held: HashMap<(WorkKind, PartyClass), usize>,
    /// Work waiting, by kind and party class.
    pub waiting: HashMap<(WorkKind, PartyClass), usize>,
    /// Slots held per namespace: the `top` holding most (ties by name),
    /// every other one summed under [`OTHER_NAMESPACES`].
    pub by_namespace: Vec<(String, usize)>,
    /// Per kind: how long the longest-waiting work of a party that holds no
    /// slot at all has waited (a party kept waiting only by its own cap or
    /// its namespace's is not counted: that wait is its own doing).
    pub unserved_wait: HashMap<WorkKind, Duration>,
}

pub fn shares(all: &[Seen], budget: &Budget, now: Timestamp, top: usize) -> Shares {
    let mut shares = Shares::default();
    let holdings = Holdings::of(all);
    let mut parties_holding: HashMap<(&str, &str), usize> = HashMap::new();
    let mut namespaces: HashMap<&str, usize> = HashMap::new();
    for seen in all.iter().filter(|s| holds_slot(s)) {
        *shares.held.entry((seen.work.kind, PartyClass::of(seen))).or_default() += 1;
        *parties_holding.entry((namespace_of(seen), party_of(seen))).or_default() += 1;
        *namespaces.entry(namespace_of(seen)).or_default() += 1;
    }
    for seen in all.iter().filter(|s| waiting(s)) {
        *shares.waiting.entry((seen.work.kind, PartyClass::of(seen))).or_default() += 1;
        let holds_none = !parties_holding.contains_key(&(namespace_of(seen), party_of(seen)));
        let own_cap = matches!(holdings.blocks(seen, budget), Some(Limit::Party | Limit::Namespace));
        if holds_none && !own_cap {
            let waited = seen.work.created.map_or(Duration::ZERO, |at| now.duration_since(at).unsigned_abs());
            let longest = shares.unserved_wait.entry(seen.work.kind).or_default();
            *longest = (*longest).max(waited);
        }
    }
    let mut ranked: Vec<(&str, usize)> = namespaces.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let rest: usize = ranked.iter().skip(top).map(|(_, held)| held).sum();
    shares.by_namespace = ranked.into_iter().take(top).map(|(ns, held)| (ns.to_string(), held)).collect();
    if rest > 0 {
        shares.by_namespace.push((OTHER_NAMESPACES.to_string(), rest));
    }
    shares
}
