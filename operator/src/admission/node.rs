//! Fair share at the node (pure): slots count admitted work, but a node
//! serves Pods of equal priority oldest first, so with a budget larger
//! than what the cluster runs, a newcomer's Pod would wait behind every
//! Pod others queued there. So, once the nodes are full (work holding a
//! slot waits for one, none of its Pods running):
//!
//! - work whose Pods wait for a node gives its slot back when another
//!   group that *runs* fewer (namespaces first, then parties within one)
//!   wants a node too (once it waited [`GIVE_WAY_AFTER`]), or when it has
//!   waited `--capacity-wait-seconds`
//!   ([`gives_way`]); its Pods never ran, so nothing is lost;
//! - waiting work is not admitted while work of a group running fewer
//!   than its own waits for a node, or work of a group running as many (its
//!   own included) has waited [`GIVE_WAY_AFTER`] ([`kept_by_nodes`]): it
//!   would only queue another Pod behind it;
//! - work that has waited for a node `--preempt-after-seconds` takes one
//!   running piece of work of a group running more than its own back
//!   ([`node_victims`]; the queue asks one victim per wait, never more:
//!   a Pod too big for any node also reads "Insufficient …", and must not
//!   stop others' work one after another for nothing), so the spot its Pod
//!   frees is the waiter's — no other group's Pod waits there.
//!
//! "Runs" is what the scheduler placed: work holding a slot whose Pods do
//! not wait for a node. The operator sees one pool of nodes: work waiting
//! for a node of a kind another's work does not need still keeps that
//! other work queued, at most `--capacity-wait-seconds`.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::preempt::{elapsed, may_take_back, protected_for};
use super::{Budget, Holdings, QueueEntry, Seen, Slots, holds_slot, namespace_of, party_of, waiting};
use crate::admission::Limit;

/// How long work's Pods wait for a node before it gives way to a group
/// running fewer ([`gives_way`]).
pub const GIVE_WAY_AFTER: Duration = Duration::from_secs(10);

/// How long work waits for a node before it takes a running slot back
/// ([`node_victims`]): the preemption delay, and never before others'
/// waiting Pods that run no less had their turn to give way (their wait
/// [`GIVE_WAY_AFTER`] and a recheck) — the spot a victim frees would go to
/// one of them, and the one victim of this wait would be spent.
pub fn victim_delay(after: Duration) -> Duration {
    after.max(GIVE_WAY_AFTER + Duration::from_secs(5))
}

/// Why work whose Pods wait for a node gives its slot back (see [`gives_way`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveWay {
    /// It waited the bound (`--capacity-wait-seconds`): `waited` so far.
    Bound { waited: Duration },
    /// Work of a group that runs fewer wants a node too.
    ToLess,
}

impl GiveWay {
    /// What the work's status says once it gave its slot back.
    pub fn message(&self, noun: &str) -> String {
        match self {
            GiveWay::Bound { waited } => format!(
                "no capacity: requeued after its Pods waited {} s for room on the cluster's nodes; nothing it \
                 did is lost, and it starts again when room returns",
                waited.as_secs()
            ),
            GiveWay::ToLess => format!(
                "no capacity: requeued; the cluster's nodes are full and work that runs less than this {noun}'s \
                 party goes first; nothing it did is lost"
            ),
        }
    }
}

/// Work holding a slot whose Pods wait for a node.
fn waits_for_node(seen: &Seen) -> bool {
    holds_slot(seen) && seen.work.waiting_for_node.is_some() && !seen.work.leaving
}

/// Whether work waiting for a node has waited [`GIVE_WAY_AFTER`] at `now`:
/// a full node, not only a busy one.
fn waited_long(seen: &Seen, now: Timestamp) -> bool {
    seen.work.waiting_for_node.is_some_and(|since| elapsed(since, now) >= GIVE_WAY_AFTER)
}

/// Work holding a slot whose Pods the scheduler placed.
fn runs(seen: &Seen) -> bool {
    holds_slot(seen) && seen.work.waiting_for_node.is_none()
}

/// Whether some work holding a slot waits for a node (the nodes' gate
/// reads how long, and whose: [`kept_by_nodes`]).
pub fn full(all: &[Seen]) -> bool {
    all.iter().any(waits_for_node)
}

/// How many pieces of work run, per namespace and per party in one.
#[derive(Default)]
struct Running<'a> {
    total: usize,
    namespaces: HashMap<&'a str, usize>,
    parties: HashMap<(&'a str, &'a str), usize>,
}

impl<'a> Running<'a> {
    fn of(all: &'a [Seen]) -> Self {
        let mut running = Self::default();
        for seen in all.iter().filter(|s| runs(s)) {
            running.total += 1;
            *running.namespaces.entry(namespace_of(seen)).or_default() += 1;
            *running.parties.entry((namespace_of(seen), party_of(seen))).or_default() += 1;
        }
        running
    }

    /// Whether `a`'s group runs fewer than `b`'s: across namespaces, the
    /// namespaces; within one, the parties (a party never runs less than itself).
    fn less(&self, a: (&str, &str), b: (&str, &str)) -> bool {
        if a.0 != b.0 {
            let namespace = |ns: &str| self.namespaces.get(ns).copied().unwrap_or(0);
            return namespace(a.0) < namespace(b.0);
        }
        let party = |key: (&str, &str)| self.parties.get(&key).copied().unwrap_or(0);
        a.1 != b.1 && party(a) < party(b)
    }
}

fn group(seen: &Seen) -> (&str, &str) {
    (namespace_of(seen), party_of(seen))
}

/// `me`'s group as the queue knows it (its party "" when it is not seen).
fn group_of<'a>(all: &'a [Seen], me: &'a QueueEntry) -> (&'a str, &'a str) {
    let party = all.iter().find(|s| s.work.uid == me.uid).map_or("", party_of);
    (me.namespace.as_str(), party)
}

/// Whether `me`, holding a slot, its Pods waiting for a node since `since`
/// (none running), gives the slot back now, and why: it waited the bound,
/// or work of a group running fewer wants a node too — waiting for one
/// itself, or queued while every slot is taken (the one `me` frees is its).
pub fn gives_way(
    all: &[Seen],
    me: &QueueEntry,
    since: Timestamp,
    budget: &Budget,
    now: Timestamp,
) -> Option<GiveWay> {
    let waited = elapsed(since, now);
    if budget.capacity_wait.is_some_and(|bound| waited >= bound) {
        return Some(GiveWay::Bound { waited });
    }
    // A Pod that waited less is not yet a full node but a busy one (Pods
    // end and start every second between blocks): giving way then would
    // trade node spots back and forth between parties of about equal share.
    if waited < GIVE_WAY_AFTER {
        return None;
    }
    let running = Running::of(all);
    // Queued work wants the slot `me` frees when every slot is taken and no
    // other limit keeps it (as `should_yield` asks it).
    let holdings = Holdings::of(all);
    let total_full = holdings.total >= budget.total;
    let kind_full = holdings.kinds.get(&me.kind).is_some_and(|held| *held >= budget.cap(me.kind));
    let mut without_me = holdings;
    if let Some(mine) = all.iter().find(|s| s.work.uid == me.uid && holds_slot(s)) {
        without_me.remove(mine);
    }
    let takes_my_slot =
        |s: &Seen| (s.work.kind == me.kind || total_full) && without_me.blocks(s, budget).is_none();
    let mine = group_of(all, me);
    let wants_node =
        |s: &&Seen| waits_for_node(s) || (waiting(s) && (total_full || kind_full) && takes_my_slot(s));
    let others = all.iter().filter(|s| s.work.uid != me.uid).filter(wants_node);
    others.into_iter().any(|s| running.less(group(s), mine)).then_some(GiveWay::ToLess)
}

/// Whether `me`, waiting for a slot, is kept from a free one by the nodes:
/// work of a group that runs fewer than `me`'s waits for a node, or work
/// of a group running as many (its own included) has waited for one
/// [`GIVE_WAY_AFTER`] at `now`. The standing then says so
/// ([`Limit::Nodes`]). The first keeps every Pod of a group running more
/// off the node's queue at once, so the spot a victim frees is the
/// waiter's ([`node_victims`]). For the second, a shorter wait is a busy
/// node's (Pods end and start every second between blocks): keeping work
/// of one party from its slot then would leave the node idle while each
/// next Job is made, its Pod created and bound — 200 workflows created at
/// once took 1.4× the floor of their Jobs that way (docs/BENCHMARKS.md, #72).
pub fn kept_by_nodes(all: &[Seen], me: &QueueEntry, now: Timestamp) -> Option<Slots> {
    NodeGate::of(all, now)?.keeps(group_of(all, me))
}

/// Who waits for a node in one group: all of them, and those that waited
/// [`GIVE_WAY_AFTER`].
#[derive(Default, Clone, Copy)]
struct Waiters {
    all: usize,
    long: usize,
}

/// The nodes' gate, read once for many pieces of waiting work (see
/// [`kept_by_nodes`]): the work running, and who waits for a node, by group.
pub struct NodeGate<'a> {
    running: Running<'a>,
    waiting: HashMap<(&'a str, &'a str), Waiters>,
}

impl<'a> NodeGate<'a> {
    /// `None` while no work waits for a node.
    pub fn of(all: &'a [Seen], now: Timestamp) -> Option<Self> {
        let mut waiting: HashMap<(&str, &str), Waiters> = HashMap::new();
        for seen in all.iter().filter(|s| waits_for_node(s)) {
            let waiters = waiting.entry(group(seen)).or_default();
            waiters.all += 1;
            waiters.long += usize::from(waited_long(seen, now));
        }
        (!waiting.is_empty()).then(|| Self { running: Running::of(all), waiting })
    }

    /// The standing of waiting work of `mine` (namespace, party), when the
    /// nodes keep it waiting.
    pub fn keeps(&self, mine: (&str, &str)) -> Option<Slots> {
        let first = self.waiting.iter().filter(|(group, _)| !self.running.less(mine, **group));
        let counted = |(group, waiters): (&(&str, &str), &Waiters)| match self.running.less(*group, mine) {
            true => waiters.all,
            false => waiters.long,
        };
        let ahead: usize = first.map(counted).sum();
        let taken = self.running.total;
        (ahead > 0).then_some(Slots { taken, limit: taken, ahead, binding: Limit::Nodes })
    }

    /// [`Self::keeps`] for `seen`.
    pub fn keeps_seen(&self, seen: &Seen) -> bool {
        self.keeps(group(seen)).is_some()
    }
}

/// The running work whose slot `head` — holding a slot, its Pods waiting
/// for a node since `since` — may take back now, the one to take first
/// first: once it waited the preemption delay, work of a group running
/// more than its own that may give its slot back mid-step, took it before
/// `head` began to wait ([`may_take_back`]) and is not protected by
/// earlier preemptions ([`protected_for`]); the latest admitted first
/// (the least of its step lost).
pub fn node_victims<'a>(
    all: &'a [Seen],
    head: &QueueEntry,
    since: Timestamp,
    budget: &Budget,
    now: Timestamp,
) -> Vec<&'a QueueEntry> {
    let Some(after) = budget.preempt_after else { return Vec::new() };
    if elapsed(since, now) < victim_delay(after) {
        return Vec::new();
    }
    let running = Running::of(all);
    let heads = group_of(all, head);
    // It began to wait when its Pod did: a slot taken while its step ran
    // (after its admission) was no debt to it then, and may be taken now.
    let waiter = QueueEntry { admitted: Some(since), ..head.clone() };
    let mut victims: Vec<&QueueEntry> = all
        .iter()
        .filter(|s| runs(s) && s.work.preemptible && running.less(heads, group(s)))
        .filter(|s| may_take_back(&waiter, &s.work) && protected_for(&s.work, after, now).is_zero())
        .map(|s| &s.work)
        .collect();
    victims.sort_by(|a, b| (b.admitted, &b.uid).cmp(&(a.admitted, &a.uid)));
    victims
}

/// Whether `me`, running, should give its slot to work waiting for a node
/// (a group running fewer than its own waits there), and whether it may
/// now, mid-step: the waiter waited the preemption delay and may take
/// `me`'s slot back ([`node_victims`]). `None` when no one waits for it.
pub fn owed_at_node(all: &[Seen], me: &QueueEntry, budget: &Budget, now: Timestamp) -> Option<bool> {
    let mine = all.iter().find(|s| s.work.uid == me.uid).filter(|s| runs(s))?;
    let running = Running::of(all);
    let mut owed = all.iter().filter(|s| waits_for_node(s) && running.less(group(s), group(mine))).peekable();
    owed.peek()?;
    let now_ok = owed.any(|head| {
        let since = head.work.waiting_for_node.unwrap_or(now);
        node_victims(all, &head.work, since, budget, now).iter().any(|v| v.uid == me.uid)
    });
    Some(now_ok)
}
