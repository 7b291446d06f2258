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
        Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            block_duration,
            workflows,
            api_calls,
            api_calls_per_reconcile,
            leader,
            watch_events,
        }
    }
}

impl Metrics {
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
