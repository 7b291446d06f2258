//! Exact concurrency limits and one fair queue for every kind of work (pure).
//!
//! Workflows and tool runs wait in one queue and share one budget of slots
//! (`--max-concurrent-work`), each kind also capped on its own
//! (`--max-concurrent-workflows`, `--max-concurrent-tool-runs`). The queue
//! sees a kind only as a [`QueueEntry`], so a third kind joins it by
//! building entries.
//!
//! Admissions are serialized (one lock, in `Memory`), and each one counts
//! the work holding slots by its *freshest* phase — what this operator last
//! wrote, else the cache — so neither parallel reconciles nor a cache that
//! lags the operator's own writes can admit more than a limit.
//!
//! The queue is fair: slots go round-robin across namespaces and, within a
//! namespace, across parties — each MCP caller is one, and everyone who
//! creates work directly is one more. A caller label is a claim anyone can
//! write, so work is its caller's only when it carries the frontend's proof
//! ([`party`]); everything else is "direct". A party's rank counts the slots
//! it holds now (of every kind) plus its place in its own queue, so a
//! namespace (or caller) with a backlog of hundreds delays another's next
//! call by at most one slot turn; equal ranks go oldest first.
//!
//! Slots are lent, not kept: when every slot is taken and the head of the
//! queue belongs to a group holding fewer slots than the group of work that
//! may give its slot back, that work yields it ([`should_yield`]) and
//! queues again — a workflow with its mined blocks kept, at its next block
//! boundary or mid-block once the head has waited `--preempt-after-seconds`
//! ([`yield_for`]: a block can take days, and a share that waits for its
//! end is no bound); a tool run only when its tool said its steps may run
//! twice (`preemptible`), its running step stopped and run again.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::jiff::Timestamp;
use mining_api::{Lifecycle, Work, labels};

pub use limits::{Budget, Limit, Slots, Taken};
pub use preempt::{
    Yield, holders_over_share, may_take_back, preempt_in, protected_for, should_yield, yield_for,
};

/// A kind of work in the queue, named by its noun ([`Work::NOUN`], one per
/// kind). The queue lists no kinds: whatever kinds its entries have share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkKind(pub &'static str);

impl WorkKind {
    pub fn of<W: Work>() -> Self {
        Self(W::NOUN)
    }
}

/// What the queue knows of one piece of work, whatever its kind.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueEntry {
    pub kind: WorkKind,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub created: Option<Timestamp>,
    /// Cancel asked, or deleted (whatever finalizer keeps it stored).
    pub leaving: bool,
    /// Its slot may be taken back while it runs ([`Work::preemptible`]).
    pub preemptible: bool,
    /// When it last took a slot ([`Work::admitted_at`]).
    pub admitted: Option<Timestamp>,
    /// How many times its slot was taken back while it ran ([`Work::preemptions`]).
    pub preemptions: u32,
    /// Since when its Pods wait for a node, none running, as its last
    /// reconcile observed them in the Pod watch (`Memory::node_waits`).
    pub waiting_for_node: Option<Timestamp>,
}

impl QueueEntry {
    pub fn of<W: Work>(work: &W) -> Self {
        let meta = work.meta();
        Self {
            kind: WorkKind::of::<W>(),
            uid: meta.uid.clone().unwrap_or_default(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            leaving: work.cancel_requested() || meta.deletion_timestamp.is_some(),
            preemptible: work.preemptible(),
            admitted: work.admitted_at(),
            preemptions: work.preemptions(),
            // Observed, not read from the status (`Memory::node_waits`).
            waiting_for_node: None,
        }
    }
}

/// Work with the phase (and admission time) this operator believes it has.
#[derive(Debug, Clone)]
pub struct Seen {
    pub work: QueueEntry,
    pub phase: Lifecycle,
    /// The party it queues as within its namespace: its caller's label when
    /// the frontend's proof says so, else "" (the namespace's direct creators).
    pub party: String,
}

/// What this operator last wrote of a piece of work's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub phase: Lifecycle,
    pub admitted: Served,
}

/// The freshest phase and admission time of each piece of `cached` work: a
/// status this operator wrote wins over the cache's (which may not have
/// caught up with it yet — a queue that missed an admission would serve a
/// party twice). `party` says which party each queues as (see [`Seen::party`]);
/// `node_waits`, since when work's Pods wait for a node, as observed.
pub fn freshest_phases<W: Work>(
    cached: &[std::sync::Arc<W>],
    written: &HashMap<String, Standing>,
    node_waits: &HashMap<String, Timestamp>,
    party: impl Fn(&W) -> String,
) -> Vec<Seen> {
    cached
        .iter()
        .map(|work| {
            let entry = QueueEntry::of(work.as_ref());
            let cached = Standing { phase: work.lifecycle(), admitted: work.admitted_at() };
            let fresh = written.get(&entry.uid).copied().unwrap_or(cached);
            // Deleted (whatever finalizer keeps it stored): it holds no slot.
            let phase = match work.meta().deletion_timestamp {
                Some(_) if !fresh.phase.is_finished() => Lifecycle::Cancelled,
                _ => fresh.phase,
            };
            // Its last admission as this operator wrote it: the cache may
            // not show a new one yet.
            let admitted = fresh.admitted.or(cached.admitted);
            // Whether its Pods wait for a node, as its last reconcile saw them.
            let waiting_for_node = node_waits.get(&entry.uid).copied().filter(|_| phase == Lifecycle::Active);
            Seen { phase, party: party(work), work: QueueEntry { admitted, waiting_for_node, ..entry } }
        })
        .collect()
}

/// The party of some work: its caller label when `proven` (the frontend's
/// proof verifies), else the direct creators' "".
pub fn party<W: Work>(work: &W, proven: impl FnOnce(&W) -> bool) -> String {
    match work.label(labels::CALLER) {
        Some(label) if proven(work) => label.to_string(),
        _ => String::new(),
    }
}

/// Whether work waits for a slot (and so holds a place in the queue).
fn waiting(seen: &Seen) -> bool {
    seen.phase == Lifecycle::Waiting && !seen.work.leaving
}

fn holds_slot(seen: &Seen) -> bool {
    seen.phase == Lifecycle::Active
}

/// Queue order among equals: creation time, then namespace and name.
fn queue_key(entry: &QueueEntry) -> (Option<Timestamp>, &str, &str) {
    (entry.created, &entry.namespace, &entry.name)
}

fn namespace_of(seen: &Seen) -> &str {
    &seen.work.namespace
}

fn party_of(seen: &Seen) -> &str {
    &seen.party
}

pub type Served = Option<Timestamp>;

/// What one level of the queue knows of each group: the slots it holds now,
/// and when it was last served (its newest admission, retained work included).
#[derive(Default)]
struct Groups<'a> {
    holding: HashMap<&'a str, usize>,
    served: HashMap<&'a str, Timestamp>,
}

impl<'a> Groups<'a> {
    fn note(&mut self, group: &'a str, seen: &Seen) {
        if holds_slot(seen) {
            *self.holding.entry(group).or_default() += 1;
        }
        if let Some(at) = seen.work.admitted {
            let served = self.served.entry(group).or_insert(at);
            *served = (*served).max(at);
        }
    }
}

/// Orders `members` (one level's waiting work, each with its place in its
/// own order so far) round-robin across the groups `group_of` names:
/// rank = slots the group holds + the member's place within the group. On
/// equal ranks, groups with no member ahead in this order go first (the
/// one served longest ago first; never served, first of all), then groups
/// whose previous member is ahead, in that member's order: by the time
/// their turn comes that member will have been served, later than any
/// service in the past. Then the oldest.
fn round_robin<'a>(
    members: Vec<(usize, &'a Seen)>,
    group_of: impl Fn(&'a Seen) -> &'a str,
    groups: &Groups<'a>,
) -> Vec<&'a Seen> {
    let mut by_group: HashMap<&str, Vec<(usize, &Seen)>> = HashMap::new();
    for member in members {
        by_group.entry(group_of(member.1)).or_default().push(member);
    }
    let mut by_rank: BTreeMap<usize, Vec<(&str, &Seen)>> = BTreeMap::new();
    for (group, mut queue) in by_group {
        queue.sort_by(|a, b| (a.0, queue_key(&a.1.work)).cmp(&(b.0, queue_key(&b.1.work))));
        let held = groups.holding.get(group).copied().unwrap_or(0);
        for (place, (_, seen)) in queue.into_iter().enumerate() {
            by_rank.entry(held.saturating_add(place)).or_default().push((group, seen));
        }
    }
    // A member's rank is one above its group's previous member's, so each
    // rank's ties are broken by positions the lower ranks already fixed.
    let mut order: Vec<&Seen> = Vec::new();
    let mut last_position: HashMap<&str, usize> = HashMap::new();
    for (_, mut members) in by_rank {
        members.sort_by_cached_key(|(group, seen)| {
            let previous = last_position.get(group).copied();
            let served = groups.served.get(group).copied();
            (previous, served, queue_key(&seen.work))
        });
        for (group, seen) in members {
            last_position.insert(group, order.len());
            order.push(seen);
        }
    }
    order
}

/// Every waiting piece of work, in the order slots go to them (fair; see above).
pub fn queue(all: &[Seen]) -> Vec<&Seen> {
    let mut namespaces = Groups::default();
    let mut parties: HashMap<&str, Groups> = HashMap::new();
    let mut waiting_by_namespace: HashMap<&str, Vec<(usize, &Seen)>> = HashMap::new();
    for seen in all {
        let namespace = namespace_of(seen);
        namespaces.note(namespace, seen);
        parties.entry(namespace).or_default().note(party_of(seen), seen);
        if waiting(seen) {
            waiting_by_namespace.entry(namespace).or_default().push((0, seen));
        }
    }
    // Within each namespace: round-robin across its parties; each member's
    // place there is its place in the namespace's own order.
    let no_parties = Groups::default();
    let mut within: Vec<(usize, &Seen)> = Vec::new();
    for (namespace, members) in waiting_by_namespace {
        let ordered = round_robin(members, party_of, parties.get(namespace).unwrap_or(&no_parties));
        within.extend(ordered.into_iter().enumerate());
    }
    // Across namespaces, by the same rule.
    round_robin(within, namespace_of, &namespaces)
}

/// Who holds a slot, as the limits count it: (namespace, party, kind).
pub type Holder<'a> = (&'a str, &'a str, WorkKind);

/// `me`'s party, as the queue knows it ("" when it does not).
pub fn party_in<'a>(all: &'a [Seen], me: &QueueEntry) -> &'a str {
    all.iter().find(|s| s.work.uid == me.uid).map_or("", party_of)
}

/// Slots held by work other than `me`, as each limit counts them.
pub fn taken_by_others(all: &[Seen], me: &QueueEntry) -> Taken {
    let party = party_in(all, me);
    let others = all.iter().filter(|s| s.work.uid != me.uid && holds_slot(s));
    others.fold(Taken::default(), |taken, s| {
        let kind = s.work.kind == me.kind;
        let namespace = namespace_of(s) == me.namespace;
        taken
            + Taken {
                all: 1,
                kind: usize::from(kind),
                party: usize::from(kind && namespace && party_of(s) == party),
                namespace: usize::from(namespace),
            }
    })
}

/// `me`'s slots, given the slots others hold (admissions in flight
/// included) and the queue's positions.
pub fn slots_for(me: &QueueEntry, taken: Taken, positions: &QueuePositions, budget: &Budget) -> Slots {
    let place = positions.ahead_of(me);
    let mut limits = vec![
        Slots { taken: taken.all, limit: budget.total, ahead: place.all, binding: Limit::Budget },
        Slots { taken: taken.kind, limit: budget.cap(me.kind), ahead: place.kind, binding: Limit::Kind },
    ];
    if let Some(cap) = budget.party_cap(me.kind) {
        limits.push(Slots { taken: taken.party, limit: cap, ahead: place.party, binding: Limit::Party });
    }
    if let Some(cap) = budget.namespace_cap() {
        limits.push(Slots {
            taken: taken.namespace,
            limit: cap,
            ahead: place.namespace,
            binding: Limit::Namespace,
        });
    }
    let slack = |s: &Slots| s.limit as i64 - s.taken as i64 - s.ahead as i64;
    // The tightest binds; on a tie, the first named (the budget).
    limits
        .into_iter()
        .reduce(|tightest, next| if slack(&next) < slack(&tightest) { next } else { tightest })
        .unwrap_or(Slots::OPEN)
}

/// The slots held now, as the limits other than the budget count them.
#[derive(Default)]
struct Holdings<'a> {
    total: usize,
    kinds: HashMap<WorkKind, usize>,
    namespaces: HashMap<&'a str, usize>,
    parties: HashMap<Holder<'a>, usize>,
}

impl<'a> Holdings<'a> {
    fn of(all: &'a [Seen]) -> Self {
        let mut holdings = Self::default();
        for seen in all.iter().filter(|s| holds_slot(s)) {
            holdings.add(seen);
        }
        holdings
    }

    fn add(&mut self, seen: &'a Seen) {
        self.total += 1;
        *self.kinds.entry(seen.work.kind).or_default() += 1;
        *self.namespaces.entry(namespace_of(seen)).or_default() += 1;
        *self.parties.entry((namespace_of(seen), party_of(seen), seen.work.kind)).or_default() += 1;
    }

    fn remove(&mut self, seen: &'a Seen) {
        let less = |count: &mut usize| *count = count.saturating_sub(1);
        less(&mut self.total);
        self.kinds.entry(seen.work.kind).and_modify(less);
        self.namespaces.entry(namespace_of(seen)).and_modify(less);
        self.parties.entry((namespace_of(seen), party_of(seen), seen.work.kind)).and_modify(less);
    }

    /// The limit other than the budget that keeps `seen` from a slot now, if any.
    fn blocks(&self, seen: &Seen, budget: &Budget) -> Option<Limit> {
        let kind = seen.work.kind;
        let held = |count: Option<&usize>| count.copied().unwrap_or(0);
        if held(self.kinds.get(&kind)) >= budget.cap(kind) {
            return Some(Limit::Kind);
        }
        let party = (namespace_of(seen), party_of(seen), kind);
        if budget.party_cap(kind).is_some_and(|cap| held(self.parties.get(&party)) >= cap) {
            return Some(Limit::Party);
        }
        let namespace = held(self.namespaces.get(namespace_of(seen)));
        budget.namespace_cap().is_some_and(|cap| namespace >= cap).then_some(Limit::Namespace)
    }
}

/// Every waiting piece of work's place in the queue, by uid: the one sort a
/// burst of waiting reconciles shares (see `Memory::queue_positions`). Work
/// that a limit other than the budget keeps waiting (its kind, its party or
/// its namespace at its cap) takes no slot, so it is no one's turn ahead.
pub fn queue_positions(all: &[Seen], budget: &Budget) -> QueuePositions {
    let holdings = Holdings::of(all);
    let mut positions = HashMap::new();
    let mut created = Vec::new();
    let mut place = 0;
    let mut of_kind = HashMap::<WorkKind, usize>::new();
    let mut of_party = HashMap::<Holder, usize>::new();
    let mut of_namespace = HashMap::<&str, usize>::new();
    // A place among its party's or its namespace's own is counted only
    // where a cap reads it: most of a long queue needs neither.
    let count = |counts: Option<&mut usize>| {
        counts.map_or(0, |counted| {
            *counted += 1;
            *counted - 1
        })
    };
    for seen in queue(all) {
        let blocked = holdings.blocks(seen, budget).is_some();
        let kind = count(Some(of_kind.entry(seen.work.kind).or_default()));
        let party = count(
            budget
                .party_cap(seen.work.kind)
                .map(|_| of_party.entry((namespace_of(seen), party_of(seen), seen.work.kind)).or_default()),
        );
        let namespace =
            count(budget.namespace_cap().map(|_| of_namespace.entry(namespace_of(seen)).or_default()));
        positions.insert(seen.work.uid.clone(), Place { all: place, kind, party, namespace });
        created.push((seen.work.created, seen.work.kind, blocked));
        if !blocked {
            place += 1;
        }
    }
    created.sort_by_key(|(at, _, _)| *at);
    QueuePositions { positions, created }
}

/// How many waiting pieces of work go before one, as each limit counts
/// them: any that may take a slot, its kind's, its party's (of its kind),
/// its namespace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Place {
    pub all: usize,
    pub kind: usize,
    pub party: usize,
    pub namespace: usize,
}

/// The queue's order, computed once and read by many.
#[derive(Debug, Default)]
pub struct QueuePositions {
    positions: HashMap<String, Place>,
    /// Creation times of the waiting work (with its kind and whether a
    /// limit keeps it waiting), sorted.
    created: Vec<(Option<Timestamp>, WorkKind, bool)>,
}

impl QueuePositions {
    pub fn contains(&self, uid: &str) -> bool {
        self.positions.contains_key(uid)
    }

    /// Who goes before `me`: its place; or, not waiting itself (cancelled,
    /// or moved on) or not seen yet, those created before it (its party's
    /// and namespace's then counted by the slots they hold only).
    pub fn ahead_of(&self, me: &QueueEntry) -> Place {
        if let Some(place) = self.positions.get(&me.uid) {
            return *place;
        }
        let before = self.created.iter().filter(|(at, _, _)| *at < me.created);
        before.fold(Place::default(), |place, (_, kind, blocked)| Place {
            all: place.all + usize::from(!blocked),
            kind: place.kind + usize::from(*kind == me.kind),
            ..place
        })
    }
}

/// The waiting work that should take the slots free now, in queue order.
pub fn next_in_queue<'a>(all: &'a [Seen], budget: &Budget, now: Timestamp) -> Vec<&'a QueueEntry> {
    let mut holdings = Holdings::of(all);
    // Work the full nodes keep waiting is nobody's next (`node`): waking it
    // would only have it say so again.
    let gate = node::NodeGate::of(all, now);
    let mut next = Vec::new();
    for seen in queue(all) {
        if holdings.total >= budget.total {
            break;
        }
        if gate.as_ref().is_some_and(|gate| gate.keeps_seen(seen)) {
            continue;
        }
        if holdings.blocks(seen, budget).is_none() {
            holdings.add(seen);
            next.push(&seen.work);
        }
    }
    next
}

mod limits;
pub mod node;
mod preempt;
pub mod shares;
#[cfg(test)]
mod tests;
