//! Slots are lent, not kept (pure): when every slot is taken and the head
//! of the queue belongs to a group holding fewer slots than the group of
//! work that may give its slot back (a workflow, or a tool run whose tool
//! said its steps may run twice), that work yields at its next boundary,
//! or mid-way once the head has waited `--preempt-after-seconds`.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::{Budget, Holdings, QueueEntry, Seen, WorkKind, holds_slot, namespace_of, party_of, queue};

/// Whether and when a workflow holding a slot gives it back (see [`yield_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Yield {
    /// Its share is not over another's: it keeps the slot.
    #[default]
    Keep,
    /// Before its next block: the head of the queue has not waited long.
    AtBlockBoundary,
    /// Now, mid-block: the head has waited [`Budget::preempt_after`]. The
    /// running block's Job goes and the block is mined again when it resumes;
    /// every block already mined is kept.
    Now,
}

/// Whether `me`, a workflow mining, should give its slot to the head of
/// the queue ([`should_yield`]), and when: at its next block boundary, or
/// now if the head has waited longer than the budget lets a boundary be
/// waited for (`now` against the head's creation or last admission: work
/// that gave its slot back has waited at least that long) — but never now
/// to work that was already waiting when `me` took the slot
/// ([`may_take_back`]).
pub fn yield_for(all: &[Seen], me: &QueueEntry, budget: &Budget, now: Timestamp) -> Yield {
    let Some(head) = yield_to(all, me, budget) else {
        // No slot owed; a node spot may be (`node`).
        return match super::node::owed_at_node(all, me, budget, now) {
            Some(true) => Yield::Now,
            Some(false) => Yield::AtBlockBoundary,
            None => Yield::Keep,
        };
    };
    let waited = waiting_since(&head.work).map(|since| elapsed(since, now));
    // `me` as the queue sees it: with its last admission this operator wrote.
    let me = all.iter().find(|s| s.work.uid == me.uid).map_or(me, |s| &s.work);
    match (budget.preempt_after, waited) {
        (Some(after), Some(waited))
            if waited >= after
                && may_take_back(&head.work, me)
                && protected_for(me, after, now).is_zero() =>
        {
            Yield::Now
        }
        _ => Yield::AtBlockBoundary,
    }
}

/// How much longer `holder` keeps its slot against being taken back
/// mid-step (`after`: the preemption delay). Each time its slot was taken
/// back while it ran doubles how long it holds the next one first: after
/// `k` preemptions, `after × (2^k − 1)` from its last admission. So under
/// any stream of others' short work, work whose step takes `s` is taken
/// back at most `⌈log2(s / after + 1)⌉` times before it holds a slot as
/// long as its step, and completes; work never preempted has no
/// protection, so for it the head's wait stays `after` (docs/OPERATOR.md).
pub fn protected_for(holder: &QueueEntry, after: Duration, now: Timestamp) -> Duration {
    let Some(admitted) = holder.admitted.filter(|_| holder.preemptions > 0) else { return Duration::ZERO };
    let doublings = holder.preemptions.min(MAX_DOUBLINGS);
    let protection = after.saturating_mul((1u32 << doublings) - 1);
    let held = elapsed(admitted, now);
    protection.saturating_sub(held)
}

/// Past this many preemptions the protection stops growing (`2^20` delays:
/// more than a year at the default 60 s).
const MAX_DOUBLINGS: u32 = 20;

/// Whether `head` may take `holder`'s slot back mid-step: only when the
/// holder took it before `head` began to wait (was created, or last took a
/// slot of its own). A slot given to other work while `head` waited was
/// that work's turn, not a debt: taking it back at once would hand one
/// slot to and fro between two parties, each preempted as soon as it
/// starts, and neither would ever finish. `head` waits for that holder's
/// next block boundary or its end instead; work that came later still
/// takes a slot back after the delay.
pub fn may_take_back(head: &QueueEntry, holder: &QueueEntry) -> bool {
    match (holder.admitted, waiting_since(head)) {
        // In whole seconds: a creation time is the API server's, cut to
        // the second, an admission the operator's to the nanosecond, so
        // a head made at X.8 s after a holder took its slot at X.3 s reads
        // as made at X.0 — before — and was never given the slot back
        // (the lost wake-up of `days_long_blocks_…`, found in round 5).
        (Some(taken), Some(waiting)) => taken.as_second() <= waiting.as_second(),
        // Holding, yet no admission written that this copy shows: it was
        // admitted a moment ago.
        (None, _) => false,
        (Some(_), None) => true,
    }
}

/// How long from `since` to `now`; zero when `now` is earlier (the API
/// server's clock ahead of this operator's), never the distance backwards.
pub(super) fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

/// When `work` began waiting for the slot it waits for: its creation, or
/// its last admission when it held a slot since (it gave that slot back).
fn waiting_since(work: &QueueEntry) -> Option<Timestamp> {
    match (work.created, work.admitted) {
        (Some(created), Some(admitted)) => Some(created.max(admitted)),
        (created, admitted) => created.or(admitted),
    }
}

/// When the head of the queue, `head`, may take a slot back mid-block:
/// `None` when it never will (no preemption configured), else how long
/// from `now` (zero: already).
pub fn preempt_in(head: &QueueEntry, budget: &Budget, now: Timestamp) -> Option<std::time::Duration> {
    let after = budget.preempt_after?;
    let waited = waiting_since(head).map_or(after, |since| elapsed(since, now));
    Some(after.saturating_sub(waited))
}

/// Whether `me`, a workflow mining and between two blocks, should give its
/// slot to the head of the queue: every slot is taken (else the head takes
/// a free one), and `me`'s group holds more slots than the head's —
/// namespaces first, then parties within one namespace. Groups an equal
/// number of slots apart never trade, so shares settle instead of swapping.
pub fn should_yield(all: &[Seen], me: &QueueEntry, budget: &Budget) -> bool {
    yield_to(all, me, budget).is_some()
}

/// The head of the queue `me` should give its slot to, if any (see [`should_yield`]).
fn yield_to<'a>(all: &'a [Seen], me: &QueueEntry, budget: &Budget) -> Option<&'a Seen> {
    let held = move |kind: Option<WorkKind>| {
        all.iter().filter(move |s| holds_slot(s) && kind.is_none_or(|k| s.work.kind == k))
    };
    let kind_full = held(Some(me.kind)).count() >= budget.cap(me.kind);
    let total_full = held(None).count() >= budget.total;
    if !total_full && !kind_full {
        return None;
    }
    // The head that would take my slot: the first no limit would keep from
    // it once mine is free — of my kind, or, when the budget is what
    // binds, of another kind too.
    let mut without_me = Holdings::of(all);
    if let Some(mine) = all.iter().find(|s| s.work.uid == me.uid && holds_slot(s)) {
        without_me.remove(mine);
    }
    let head = queue(all)
        .into_iter()
        .find(|s| (s.work.kind == me.kind || total_full) && without_me.blocks(s, budget).is_none())?;
    let held_in = |namespace: &str, party: Option<&str>| {
        held(None)
            .filter(|s| namespace_of(s) == namespace)
            .filter(|s| party.is_none_or(|p| party_of(s) == p))
            .count()
    };
    let (my_namespace, head_namespace) = (me.namespace.as_str(), namespace_of(head));
    if my_namespace != head_namespace {
        return (held_in(my_namespace, None) > held_in(head_namespace, None)).then_some(head);
    }
    let my_party = all.iter().find(|s| s.work.uid == me.uid).map_or("", party_of);
    let head_party = party_of(head);
    let over = held_in(my_namespace, Some(my_party)) > held_in(my_namespace, Some(head_party));
    (my_party != head_party && over).then_some(head)
}

/// The work holding slots that should give one to the head of the queue
/// (each by [`should_yield`]) and may while it runs: whom the head wakes
/// when it may take a slot back mid-block, since a block that takes days
/// sends no event before. (A tool run that is not preemptible keeps its
/// slot, and so does work that took it while `head` waited, or that is
/// still protected by earlier preemptions: [`protected_for`].)
pub fn holders_over_share<'a>(
    all: &'a [Seen],
    head: &QueueEntry,
    budget: &Budget,
    now: Timestamp,
) -> Vec<&'a QueueEntry> {
    let unprotected = |work: &QueueEntry| {
        budget.preempt_after.is_none_or(|after| protected_for(work, after, now).is_zero())
    };
    all.iter()
        .filter(|s| {
            holds_slot(s) && s.work.preemptible && may_take_back(head, &s.work) && unprotected(&s.work)
        })
        .filter(|s| should_yield(all, &s.work, budget))
        .map(|s| &s.work)
        .collect()
}
