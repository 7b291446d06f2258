//! Prometheus metrics, with label values from fixed sets only.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use mining_api::WorkflowPhase;

use crate::api_calls::ApiCall;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: WorkflowPhase,
}

/// Work by kind and party class (fixed sets: never a caller's or a namespace's name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShareLabels {
    pub kind: &'static str,
    pub party: &'static str,
}

/// Work whose Pods could not start, by kind and reason (`CannotStart`, `StartTimedOut`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StartLabels {
    pub kind: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// A namespace among the [`NAMESPACES_SHOWN`] holding most slots, or "(other)".
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabels {
    pub namespace: String,
}

/// How many namespaces get a series of their own in `slots_held_by_namespace`.
pub const NAMESPACES_SHOWN: usize = 20;

/// The watches whose objects the operator caches.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub resource: &'static str,
}

pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Counter,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub block_duration: Histogram,
    pub workflows: Family<PhaseLabels, Gauge>,
    pub api_calls: Family<ApiCall, Counter>,
    pub api_calls_per_reconcile: Histogram,
    /// 1 while this replica holds the leader lease, else 0.
    pub leader: Gauge,
    /// Objects each watch delivered (listed or changed), before projection.
    pub watch_events: Family<WatchLabels, Counter>,
    pub slots_held: Family<ShareLabels, Gauge>,
    pub work_waiting: Family<ShareLabels, Gauge>,
    pub slots_held_by_namespace: Family<NamespaceLabels, Gauge>,
    pub unserved_wait: Family<KindLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub wait_for_first_slot: Family<KindLabels, Histogram>,
    /// Work failed because its Pods could not start (see `mining_api::pod_start`).
    pub start_failures: Family<StartLabels, Counter>,
    /// Work whose Pods began to wait for a cause that may clear.
    pub start_waits: Family<KindLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("mining_operator");
        let reconciles = Counter::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by kind of error",
            reconcile_errors.clone(),
        );
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took",
            reconcile_duration.clone(),
        );
        let block_duration = Histogram::new(exponential_buckets(0.05, 2.0, 16));
        registry.register(
            "block_duration_seconds",
            "Time a block's Job took, start to completion",
            block_duration.clone(),
        );
        let workflows = Family::<PhaseLabels, Gauge>::default();
        registry.register("workflows", "MiningWorkflows by phase", workflows.clone());
        let api_calls = Family::<ApiCall, Counter>::default();
        registry.register("api_calls", "Calls to the API server, by verb and resource", api_calls.clone());
        let api_calls_per_reconcile = Histogram::new([0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0]);
        registry.register(
            "api_calls_per_reconcile",
            "Calls to the API server one reconcile made",
            api_calls_per_reconcile.clone(),
        );
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica holds the leader lease", leader.clone());
        let watch_events = Family::<WatchLabels, Counter>::default();
        registry.register(
            "watch_events",
            "Objects a watch delivered (listed or changed), by resource",
            watch_events.clone(),
        );
        let slots_held = Family::<ShareLabels, Gauge>::default();
        registry.register(
            "slots_held",
            "Slots held, by kind of work and party class (mcp-caller, direct)",
            slots_held.clone(),
        );
        let work_waiting = Family::<ShareLabels, Gauge>::default();
        registry.register(
            "work_waiting",
            "Work waiting for a slot, by kind and party class",
            work_waiting.clone(),
        );
        let slots_held_by_namespace = Family::<NamespaceLabels, Gauge>::default();
        registry.register(
            "slots_held_by_namespace",
            "Slots held by the 20 namespaces holding most; the rest summed as (other)",
            slots_held_by_namespace.clone(),
        );
        let unserved_wait = Family::<KindLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "unserved_wait_seconds",
            "Longest wait of work whose party holds no slot (not counting waits its own caps impose), by kind",
            unserved_wait.clone(),
        );
        let wait_for_first_slot = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.5, 2.0, 16))
        });
        registry.register(
            "wait_for_first_slot_seconds",
            "From creation to first admission, by kind",
            wait_for_first_slot.clone(),
        );
        let start_failures = Family::<StartLabels, Counter>::default();
        registry.register(
            "start_failures",
            "Work failed because its Pods could not start: refused, invalid image, missing config (CannotStart), or a wait past the bound (StartTimedOut)",
            start_failures.clone(),
        );
        let start_waits = Family::<KindLabels, Counter>::default();
        registry.register(
            "start_waits",
            "Work whose Pods began to wait for a cause that may clear (image pull, quota, no matching node; no room on the nodes once it lasted 30 s)",
            start_waits.clone(),
        );
        Self {
            registry,
            slots_held,
            work_waiting,
            slots_held_by_namespace,
            unserved_wait,
            wait_for_first_slot,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            block_duration,
            workflows,
            api_calls,
            api_calls_per_reconcile,
            leader,
            watch_events,
            start_failures,
            start_waits,
        }
    }
}

impl Metrics {
    /// Counts an Event of the Pod-start observation (`mining_api::pod_start::reasons`)
    /// for work of `kind`: a failure by its reason, or the start of a wait.
    pub fn count_start_event(&self, kind: &'static str, reason: &'static str) {
        use mining_api::pod_start::reasons::{CANNOT_START, START_TIMED_OUT, WAITING_TO_START};
        match reason {
            CANNOT_START | START_TIMED_OUT => {
                self.start_failures.get_or_create(&StartLabels { kind, reason }).inc();
            }
            WAITING_TO_START => {
                self.start_waits.get_or_create(&KindLabels { kind }).inc();
            }
            _ => {}
        }
    }

    /// Sets the workflows-by-phase gauge from a count of phases.
    pub fn set_workflow_phases(&self, phases: impl IntoIterator<Item = WorkflowPhase>) {
        let mut counts = [0i64; 5];
        for phase in phases {
            counts[phase as usize] += 1;
        }
        for phase in WorkflowPhase::ALL {
            self.workflows.get_or_create(&PhaseLabels { phase }).set(counts[phase as usize]);
        }
    }

    /// Sets the fair-share gauges from who holds and who waits now.
    pub fn set_shares(&self, shares: &crate::admission::shares::Shares, kinds: &[&'static str]) {
        use crate::admission::WorkKind;
        use crate::admission::shares::PartyClass;
        for kind in kinds.iter().copied() {
            for party in [PartyClass::Caller, PartyClass::Direct] {
                let labels = ShareLabels { kind, party: party.label() };
                let of = |counts: &std::collections::HashMap<(WorkKind, PartyClass), usize>| {
                    counts.get(&(WorkKind(kind), party)).copied().unwrap_or(0) as i64
                };
                self.slots_held.get_or_create(&labels).set(of(&shares.held));
                self.work_waiting.get_or_create(&labels).set(of(&shares.waiting));
            }
            let waited = shares.unserved_wait.get(&WorkKind(kind)).map_or(0.0, |d| d.as_secs_f64());
            self.unserved_wait.get_or_create(&KindLabels { kind }).set(waited);
        }
        // The namespaces shown change: the old series go.
        self.slots_held_by_namespace.clear();
        for (namespace, held) in &shares.by_namespace {
            self.slots_held_by_namespace
                .get_or_create(&NamespaceLabels { namespace: namespace.clone() })
                .set(*held as i64);
        }
    }

    /// Counts one object a watch delivered.
    pub fn saw(&self, resource: &'static str) {
        self.watch_events.get_or_create(&WatchLabels { resource }).inc();
    }

    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String");
        text
    }
}
