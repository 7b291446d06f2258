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
//! queue belongs to a group holding fewer slots than the group of a
//! mining workflow, that workflow yields its slot ([`should_yield`]) and
//! queues again with its mined blocks kept — at its next block boundary, or
//! mid-block once the head has waited `--preempt-after-seconds`
//! ([`yield_for`]): a block can take days, and a share that waits for its
//! end is no bound. (A tool run cannot resume, so it never yields.)

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::jiff::Timestamp;
use mining_api::{Lifecycle, Work, labels};

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
/// party twice). `party` says which party each queues as (see [`Seen::party`]).
pub fn freshest_phases<W: Work>(
    cached: &[std::sync::Arc<W>],
    written: &HashMap<String, Standing>,
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
            Seen { phase, party: party(work), work: QueueEntry { admitted, ..entry } }
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

/// The slots: one budget for all work, and a cap per kind inside it (a
/// kind without one is bounded by the budget alone); optionally, what one
/// party may hold of a kind and what one namespace may hold of all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub total: usize,
    caps: Vec<(WorkKind, usize)>,
    party_caps: Vec<(WorkKind, usize)>,
    namespace_cap: Option<usize>,
    /// How long the head of the queue waits for a block boundary before a
    /// workflow over its share gives its slot back mid-block (`None`: only
    /// at boundaries).
    pub preempt_after: Option<std::time::Duration>,
}

impl Budget {
    pub fn new(total: usize) -> Self {
        Self { total, caps: Vec::new(), party_caps: Vec::new(), namespace_cap: None, preempt_after: None }
    }

    /// The same budget, one party holding at most `cap` slots of `kind`
    /// (for work that cannot be taken back: it never borrows past this).
    pub fn capping_per_party(mut self, kind: WorkKind, cap: usize) -> Self {
        self.party_caps.retain(|(k, _)| *k != kind);
        self.party_caps.push((kind, cap));
        self
    }

    /// The same budget, one namespace holding at most `cap` slots of every kind together.
    pub fn capping_per_namespace(mut self, cap: usize) -> Self {
        self.namespace_cap = Some(cap);
        self
    }

    pub fn party_cap(&self, kind: WorkKind) -> Option<usize> {
        self.party_caps.iter().find(|(k, _)| *k == kind).map(|(_, cap)| *cap)
    }

    pub fn namespace_cap(&self) -> Option<usize> {
        self.namespace_cap
    }

    /// The same budget, taking slots back mid-block once the head has waited `after`.
    pub fn preempting_after(mut self, after: std::time::Duration) -> Self {
        self.preempt_after = Some(after);
        self
    }

    /// The same budget with `kind` capped at `cap` slots.
    pub fn capping(mut self, kind: WorkKind, cap: usize) -> Self {
        self.caps.retain(|(k, _)| *k != kind);
        self.caps.push((kind, cap));
        self
    }

    pub fn cap(&self, kind: WorkKind) -> usize {
        self.caps.iter().find(|(k, _)| *k == kind).map_or(self.total, |(_, cap)| *cap)
    }
}

/// Which limit decides whether some work may take a slot now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Limit {
    /// The one budget of slots for all work (`--max-concurrent-work`).
    #[default]
    Budget,
    /// Its kind's own cap (`--max-concurrent-workflows`, `--max-concurrent-tool-runs`).
    Kind,
    /// What one party may hold of its kind (`--max-tool-runs-per-caller`).
    Party,
    /// What one namespace may hold of all kinds (`--max-work-per-namespace`).
    Namespace,
}

/// How many slots are taken, of which limit, and how many waiting ahead of
/// `me` go first — for the limit that binds `me` (whichever of the budget,
/// its kind's cap, its party's and its namespace's leaves it fewer). `me`
/// starts when `ahead < limit - taken`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Slots {
    pub taken: usize,
    pub limit: usize,
    pub ahead: usize,
    pub binding: Limit,
}

impl Slots {
    /// A standing that admits: what work that does not wait is planned
    /// with (only waiting work's standing is ever computed).
    pub const OPEN: Self = Self { taken: 0, limit: 1, ahead: 0, binding: Limit::Budget };

    pub fn admits(&self) -> bool {
        self.ahead < self.limit.saturating_sub(self.taken)
    }

    /// How many of those waiting ahead of `me` do not fit in the free slots.
    pub fn waiting_for(&self) -> usize {
        self.ahead.saturating_sub(self.limit.saturating_sub(self.taken))
    }

    /// What queued work says while it waits: which limit holds it, how
    /// full it is, and how many go first (never who). `running` says its
    /// kind at work ("workflows are mining").
    pub fn queued_message(&self, running: &str) -> String {
        let (taken, limit, ahead) = (self.taken, self.limit, self.waiting_for());
        match self.binding {
            Limit::Budget => format!(
                "queued: {ahead} ahead of it; {taken} of at most {limit} slots (workflows and tool runs) are taken"
            ),
            Limit::Kind => format!("queued: {ahead} ahead of it; {taken} of at most {limit} {running}"),
            Limit::Party => format!(
                "queued: its party (one MCP caller, or the namespace's direct creators) already holds {taken} of \
                 at most {limit} at once of this kind of work; {ahead} of its own go first; it starts when one of \
                 those ends"
            ),
            Limit::Namespace => format!(
                "queued: this namespace already holds {taken} of at most {limit} slots at once; {ahead} of its own \
                 go first; it starts when one of those ends"
            ),
        }
    }
}

/// Slots held by others (and admissions in flight), as each limit counts
/// them: all, `me`'s kind, `me`'s party's of `me`'s kind, `me`'s namespace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Taken {
    pub all: usize,
    pub kind: usize,
    pub party: usize,
    pub namespace: usize,
}

impl std::ops::Add for Taken {
    type Output = Self;
    fn add(self, other: Self) -> Self {
        Self {
            all: self.all + other.all,
            kind: self.kind + other.kind,
            party: self.party + other.party,
            namespace: self.namespace + other.namespace,
        }
    }
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
        return Yield::Keep;
    };
    let waited = waiting_since(&head.work).map(|since| now.duration_since(since).unsigned_abs());
    // `me` as the queue sees it: with its last admission this operator wrote.
    let me = all.iter().find(|s| s.work.uid == me.uid).map_or(me, |s| &s.work);
    match (budget.preempt_after, waited) {
        (Some(after), Some(waited)) if waited >= after && may_take_back(&head.work, me) => Yield::Now,
        _ => Yield::AtBlockBoundary,
    }
}

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
        (Some(taken), Some(waiting)) => taken <= waiting,
        // Holding, yet no admission written that this copy shows: it was
        // admitted a moment ago.
        (None, _) => false,
        (Some(_), None) => true,
    }
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
    let waited = waiting_since(head).map_or(after, |since| now.duration_since(since).unsigned_abs());
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
/// slot, and so does work that took it while `head` waited.)
pub fn holders_over_share<'a>(all: &'a [Seen], head: &QueueEntry, budget: &Budget) -> Vec<&'a QueueEntry> {
    all.iter()
        .filter(|s| holds_slot(s) && s.work.preemptible && may_take_back(head, &s.work))
        .filter(|s| should_yield(all, &s.work, budget))
        .map(|s| &s.work)
        .collect()
}

/// The waiting work that should take the slots free now, in queue order.
pub fn next_in_queue<'a>(all: &'a [Seen], budget: &Budget) -> Vec<&'a QueueEntry> {
    let mut holdings = Holdings::of(all);
    let mut next = Vec::new();
    for seen in queue(all) {
        if holdings.total >= budget.total {
            break;
        }
        if holdings.blocks(seen, budget).is_none() {
            holdings.add(seen);
            next.push(&seen.work);
        }
    }
    next
}

pub mod shares;
#[cfg(test)]
mod tests;
