//! The limits work is admitted under (pure): one budget of slots, a cap per
//! kind, per party and per namespace inside it, and what a piece of work's
//! standing against them is ([`Slots`]) — which limit holds it, and what its
//! status says while it waits.

use super::WorkKind;

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
    /// How long work holding a slot may wait for its Pods to get a node
    /// before it gives the slot back and queues again (`None`: as long as
    /// it takes), like Kueue's `waitForPodsReady`.
    pub capacity_wait: Option<std::time::Duration>,
}

impl Budget {
    pub fn new(total: usize) -> Self {
        Self {
            total,
            caps: Vec::new(),
            party_caps: Vec::new(),
            namespace_cap: None,
            preempt_after: None,
            capacity_wait: None,
        }
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

    /// The same budget, work whose Pods waited `bound` for a node giving its slot back.
    pub fn giving_back_after(mut self, bound: std::time::Duration) -> Self {
        self.capacity_wait = Some(bound);
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
    /// The cluster's nodes: they are full (work holding a slot waits for
    /// one), and work that runs no less than `me`'s waits first
    /// ([`super::node::kept_by_nodes`]). `taken` and `limit` count the
    /// work of this operator that runs, `ahead` the work waiting first.
    Nodes,
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
        let (taken, limit, ahead) = (self.taken, self.limit, rough_count(self.waiting_for()));
        match self.binding {
            Limit::Budget => format!(
                "queued: {ahead} ahead of it; {taken} of at most {limit} slots (all kinds) are taken"
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
            // No counts: they change with every Pod placed or given back,
            // and each change would be a status write of every waiter.
            Limit::Nodes => "queued: waiting for a node: the cluster's nodes are full, and work of a party running \
                             no more than this one's waits for a node first; it is admitted when that work runs or \
                             gives its slot back"
                .to_string(),
        }
    }
}

/// How many wait ahead, as a queued message says it: exact under ten, then
/// the step of 10, 20, 50, 100, 200, 500, … it has reached ("50+").
///
/// Why: every change of a waiter's message is a status write of that
/// waiter. Exact counts rewrote every waiter each time the queue moved —
/// O(n) writes a run for a queue of n, O(n²) in all; steps make it
/// O(log n) a run, while the last ten places, the ones a caller watches,
/// stay exact.
pub fn rough_count(count: usize) -> String {
    if count < 10 {
        return count.to_string();
    }
    let steps = (1u32..)
        .map_while(|power| 10usize.checked_pow(power))
        .flat_map(|decade| [1, 2, 5].into_iter().filter_map(move |multiple| decade.checked_mul(multiple)));
    let step = steps.take_while(|step| *step <= count).last().unwrap_or(10);
    format!("{step}+")
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
