//! Prometheus metrics, with label values from fixed sets only (never ids,
//! callers or error texts: unbounded label values).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// One of the four tool names, or "unknown".
    pub tool: &'static str,
    /// An outcome status, `invalid_arguments`, `refused` or `error`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolNameLabels {
    pub tool: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub tool_calls: Family<ToolLabels, Counter>,
    pub tool_duration: Family<ToolNameLabels, Histogram>,
    pub waiters: Gauge,
    pub watch_events: Counter,
    pub watch_errors: Counter,
    pub auth_failures: Family<ReasonLabels, Counter>,
    pub api_errors: Family<ReasonLabels, Counter>,
    pub api_requests: Family<ReasonLabels, Counter>,
    pub waits_shortened: Family<ReasonLabels, Counter>,
    pub starts_refused: Family<ReasonLabels, Counter>,
    pub connections_open: Gauge,
    pub connections_refused: Counter,
    pub connections_displaced: Counter,
    pub operator_leading: Gauge,
    pub listens_open: Gauge,
    pub listens_refused: Family<ReasonLabels, Counter>,
    pub task_notifications: Counter,
    pub namespace_reach_subjects: Gauge,
    pub namespace_reach_audit_errors: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("mcp_frontend");
        let tool_calls = Family::<ToolLabels, Counter>::default();
        registry.register("tool_calls", "Tool calls answered, by tool and outcome", tool_calls.clone());
        let tool_duration = Family::<ToolNameLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 18))
        });
        registry.register(
            "tool_duration_seconds",
            "Time to answer a tool call, waits included",
            tool_duration.clone(),
        );
        let namespace_reach_subjects = Gauge::default();
        namespace_reach_subjects.set(-1);
        registry.register(
            "namespace_reach_subjects",
            "Subjects besides cluster admins, Kubernetes and this product that hold every caller's runs in the \
             workflow namespace (create Pods, exec, Secrets, run status): 0 on a default install; -1 before the \
             first audit (kubectl mining audit lists them)",
            namespace_reach_subjects.clone(),
        );
        let namespace_reach_audit_errors = Counter::default();
        registry.register(
            "namespace_reach_audit_errors",
            "Audits of the workflow namespace's reach that failed (RBAC read or review refused)",
            namespace_reach_audit_errors.clone(),
        );
        let waiters = Gauge::default();
        registry.register("waiters", "Calls waiting for a workflow to change", waiters.clone());
        let watch_events = Counter::default();
        registry.register("watch_events", "Events from the one MiningWorkflow watch", watch_events.clone());
        let watch_errors = Counter::default();
        registry.register(
            "watch_errors",
            "Errors of the MiningWorkflow watch (it retries)",
            watch_errors.clone(),
        );
        let auth_failures = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "auth_failures",
            "Requests refused by authentication, by reason",
            auth_failures.clone(),
        );
        let api_errors = Family::<ReasonLabels, Counter>::default();
        registry.register("api_errors", "Kubernetes API calls that failed, by call", api_errors.clone());
        let api_requests = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "api_requests",
            "Kubernetes API calls made for tool and task requests, by call (the watch aside)",
            api_requests.clone(),
        );
        let waits_shortened = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "waits_shortened",
            "Waits answered at once because a cap on concurrent waits was reached, by cap",
            waits_shortened.clone(),
        );
        let starts_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "starts_refused",
            "start_mining calls refused by a per-caller quota, by quota",
            starts_refused.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "Open connections to the MCP listener",
            connections_open.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Connections closed at once: every place was serving or had served an authenticated request",
            connections_refused.clone(),
        );
        let connections_displaced = Counter::default();
        registry.register(
            "connections_displaced",
            "Idle connections that never carried an authenticated request, closed to make room for a new one",
            connections_displaced.clone(),
        );
        let operator_leading = Gauge::default();
        operator_leading.set(-1);
        registry.register(
            "operator_leading",
            "1 while an operator holds its leader Lease, 0 while none does, -1 when unknown (no Lease configured or readable)",
            operator_leading.clone(),
        );
        let listens_open = Gauge::default();
        registry.register(
            "listens_open",
            "Open subscriptions/listen streams of this replica",
            listens_open.clone(),
        );
        let listens_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "listens_refused",
            "subscriptions/listen requests refused because a cap on open listens was reached, by cap",
            listens_refused.clone(),
        );
        let task_notifications = Counter::default();
        registry.register(
            "task_notifications",
            "notifications/tasks sent on subscriptions/listen streams",
            task_notifications.clone(),
        );
        Self {
            registry,
            tool_calls,
            tool_duration,
            waiters,
            watch_events,
            watch_errors,
            auth_failures,
            api_errors,
            api_requests,
            waits_shortened,
            starts_refused,
            connections_open,
            connections_refused,
            connections_displaced,
            operator_leading,
            namespace_reach_subjects,
            namespace_reach_audit_errors,
            listens_open,
            listens_refused,
            task_notifications,
        }
    }
}

impl Metrics {
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
