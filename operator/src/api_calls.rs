//! Counts the operator's calls to the API server by verb and resource, and
//! per reconcile: the cost the controller puts on the cluster, in `/metrics`.
//!
//! The count is taken in the client's request path (a tower layer), so it
//! covers every call, ours and kube-runtime's watches alike, and cannot drift
//! from the code that makes them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tracing::Instrument as _;
use tracing_subscriber::Registry;
use tracing_subscriber::registry::LookupSpan as _;

/// One kind of API call. Both labels come from fixed sets (never from a
/// name in the URL), so the metric's cardinality is bounded.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiCall {
    pub verb: &'static str,
    pub resource: &'static str,
}

/// Resources the operator talks to besides its kinds of work; anything
/// else is counted as `other`.
const RESOURCES: &[&str] = &["jobs", "pods", "secrets", "events", "leases", "namespaces"];

/// The kinds of work's resources and their status subresources, added as
/// each kind registers (`work::Registry`): a new kind's calls are counted
/// under its own name, never silently as `other`. One entry a kind, each
/// leaked once: the set is as small and as fixed as the kinds compiled in.
static WORK_RESOURCES: RwLock<Vec<(&'static str, &'static str)>> = RwLock::new(Vec::new());

/// Counts calls about `plural` (a kind of work) and its status under their own labels.
pub fn count_work_resource(plural: &str) {
    let mut resources = WORK_RESOURCES.write().unwrap_or_else(PoisonError::into_inner);
    if !resources.iter().any(|(known, _)| *known == plural) {
        let name: &'static str = Box::leak(plural.to_string().into_boxed_str());
        let status: &'static str = Box::leak(format!("{plural}/status").into_boxed_str());
        resources.push((name, status));
    }
}

/// The label of `resource` (and `/status` of it), if it is one the metric names.
fn known(resource: &str, status: bool) -> Option<&'static str> {
    if !status && let Some(fixed) = RESOURCES.iter().find(|known| **known == resource) {
        return Some(fixed);
    }
    let work = WORK_RESOURCES.read().unwrap_or_else(PoisonError::into_inner);
    let (plural, with_status) = work.iter().find(|(known, _)| *known == resource)?;
    Some(if status { with_status } else { plural })
}

/// What a request is, from its method and URL alone.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> ApiCall {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return ApiCall { verb: verb_of(method, false, query), resource: "other" },
    };
    // A namespaced path: namespaces/NS/RESOURCE/...; `namespaces/NS` alone is a namespace.
    let rest = match rest {
        ["namespaces", _ns, resource, more @ ..] => (*resource, more),
        [resource, more @ ..] => (*resource, more),
        [] => ("", &[][..]),
    };
    let (resource, more) = rest;
    let named = !more.is_empty();
    let resource = match more.get(1) {
        Some(&"status") if more.len() == 2 => known(resource, true).unwrap_or("other"),
        Some(_) => "other",
        None => known(resource, false).unwrap_or("other"),
    };
    ApiCall { verb: verb_of(method, named, query), resource }
}

fn verb_of(method: &Method, named: bool, query: Option<&str>) -> &'static str {
    let watch = query.unwrap_or_default().split('&').any(|pair| matches!(pair, "watch=true" | "watch=1"));
    match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

/// The count of one reconcile's calls, kept in its span.
///
/// A kube `Client` sends each request from the worker task of a tower
/// `Buffer`, never from the reconcile's own task, so nothing task-local is
/// seen where requests are counted; the `Buffer` does carry the caller's
/// tracing span across. The reconcile's span holds the count, and the
/// counting step finds it among the spans the request was made in.
struct CallsInReconcile(Arc<AtomicU64>);

/// Runs one reconcile within `span` (its `reconcile` span) and returns what
/// it returned with the number of API calls it made. Counting needs the span
/// recorded by the subscriber (`tracing_subscriber`'s registry, at the
/// default `info` level); with no such subscriber the count is 0.
pub async fn counting_calls<F: std::future::Future>(span: tracing::Span, reconcile: F) -> (F::Output, u64) {
    let calls = Arc::new(AtomicU64::new(0));
    span.with_subscriber(|(id, dispatch)| {
        if let Some(span) = dispatch.downcast_ref::<Registry>().and_then(|registry| registry.span(id)) {
            span.extensions_mut().insert(CallsInReconcile(calls.clone()));
        }
    });
    let output = reconcile.instrument(span).await;
    (output, calls.load(Ordering::Relaxed))
}

/// Adds one call to the reconcile the current span belongs to, if any.
fn count_in_reconcile() {
    tracing::Span::current().with_subscriber(|(id, dispatch)| {
        let Some(span) = dispatch.downcast_ref::<Registry>().and_then(|registry| registry.span(id)) else {
            return;
        };
        for within in span.scope() {
            if let Some(calls) = within.extensions().get::<CallsInReconcile>() {
                calls.0.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    });
}

/// The counting step of the client's request path.
#[derive(Clone)]
pub struct CountCalls {
    calls: Family<ApiCall, Counter>,
}

impl CountCalls {
    /// Counts into `calls` (a handle on the family in the metrics registry).
    pub fn new(calls: Family<ApiCall, Counter>) -> Self {
        Self { calls }
    }

    pub fn count<B>(&self, request: &Request<B>) {
        let call = classify(request.method(), request.uri().path(), request.uri().query());
        self.calls.get_or_create(&call).inc();
        // Outside a reconcile (watches, Events sent from their own task) there is nothing to add to.
        count_in_reconcile();
    }
}

/// The client, with every request counted.
pub fn counted_client(config: kube::Config, counter: CountCalls) -> kube::Result<kube::Client> {
    let layer = tower::util::MapRequestLayer::new(move |request: Request<kube::client::Body>| {
        counter.count(&request);
        request
    });
    Ok(kube::client::ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn call(method: Method, uri: &str) -> (&'static str, &'static str) {
        count_work_resource("miningworkflows");
        count_work_resource("toolruns");
        let (path, query) = uri.split_once('?').map_or((uri, None), |(p, q)| (p, Some(q)));
        let call = classify(&method, path, query);
        (call.verb, call.resource)
    }

    #[test]
    fn the_operators_own_calls_are_told_apart() {
        let ns = "/apis/batch/v1/namespaces/team-a";
        assert_eq!(call(Method::GET, &format!("{ns}/jobs?labelSelector=x")), ("list", "jobs"));
        assert_eq!(call(Method::GET, "/apis/batch/v1/jobs?watch=true&labelSelector=x"), ("watch", "jobs"));
        assert_eq!(call(Method::POST, &format!("{ns}/jobs")), ("create", "jobs"));
        assert_eq!(call(Method::GET, &format!("{ns}/jobs/block-1")), ("get", "jobs"));
        assert_eq!(call(Method::DELETE, &format!("{ns}/jobs/block-1")), ("delete", "jobs"));
        assert_eq!(
            call(Method::GET, "/api/v1/namespaces/a/pods?labelSelector=job-name%3Dj"),
            ("list", "pods")
        );
        let status = "/apis/mining.example.dev/v1alpha1/namespaces/a/miningworkflows/w/status?fieldManager=m";
        assert_eq!(call(Method::PATCH, status), ("patch", "miningworkflows/status"));
        assert_eq!(
            call(Method::DELETE, "/apis/mining.example.dev/v1alpha1/namespaces/a/miningworkflows/w"),
            ("delete", "miningworkflows")
        );
        assert_eq!(call(Method::POST, "/apis/events.k8s.io/v1/namespaces/a/events"), ("create", "events"));
        assert_eq!(
            call(Method::PATCH, "/apis/coordination.k8s.io/v1/namespaces/a/leases/op"),
            ("patch", "leases")
        );
        assert_eq!(call(Method::GET, "/api/v1/namespaces/a"), ("get", "namespaces"));
        // A tool run's own calls, as a workflow's.
        let runs = "/apis/mining-operator.dev/v1alpha1/namespaces/a/toolruns";
        assert_eq!(call(Method::PATCH, &format!("{runs}/r/status")), ("patch", "toolruns/status"));
        assert_eq!(call(Method::DELETE, &format!("{runs}/r")), ("delete", "toolruns"));
        assert_eq!(call(Method::POST, "/api/v1/namespaces/a/secrets"), ("create", "secrets"));
        assert_eq!(call(Method::DELETE, "/api/v1/namespaces/a/pods"), ("deletecollection", "pods"));
    }

    #[test]
    fn a_kind_registered_later_is_counted_under_its_own_name() {
        let sleeps = "/apis/test.mining-operator.dev/v1/namespaces/a/sleepers";
        assert_eq!(call(Method::PATCH, &format!("{sleeps}/s/status")), ("patch", "other"));
        count_work_resource("sleepers");
        count_work_resource("sleepers");
        assert_eq!(call(Method::PATCH, &format!("{sleeps}/s/status")), ("patch", "sleepers/status"));
        assert_eq!(call(Method::DELETE, &format!("{sleeps}/s")), ("delete", "sleepers"));
        let registered = WORK_RESOURCES.read().unwrap();
        assert_eq!(registered.iter().filter(|(plural, _)| *plural == "sleepers").count(), 1, "once a kind");
    }

    #[test]
    fn names_never_become_labels() {
        assert_eq!(call(Method::GET, "/api/v1/namespaces/a/configmaps/s"), ("get", "other"));
        assert_eq!(call(Method::GET, "/api/v1/namespaces/a/pods/p/log"), ("get", "other"));
        assert_eq!(call(Method::GET, "/version"), ("list", "other"));
    }

    #[tokio::test]
    async fn a_reconcile_counts_only_its_own_calls() {
        let _subscriber = tracing::subscriber::set_default(Registry::default());
        let family = Family::<ApiCall, Counter>::default();
        let counter = CountCalls::new(family.clone());
        let request = Request::get("/api/v1/namespaces/a/pods").body(()).unwrap();
        counter.count(&request); // outside any reconcile
        let ((), calls) = counting_calls(tracing::info_span!("reconcile"), async {
            counter.count(&request);
            // From a span within the reconcile's, and from another task
            // carrying it (as the client's Buffer does).
            tracing::info_span!("inner").in_scope(|| counter.count(&request));
            let span = tracing::Span::current();
            let counter = counter.clone();
            let request = Request::get("/api/v1/namespaces/a/pods").body(()).unwrap();
            tokio::spawn(async move { span.in_scope(|| counter.count(&request)) }).await.unwrap();
        })
        .await;
        assert_eq!(calls, 3);
        assert_eq!(family.get_or_create(&ApiCall { verb: "list", resource: "pods" }).get(), 4);
    }

    proptest! {
        #[test]
        fn any_url_is_classified_into_the_fixed_label_sets(path in "\\PC{0,80}", query in "\\PC{0,40}") {
            let call = classify(&Method::GET, &path, Some(&query));
            let work = WORK_RESOURCES.read().unwrap().clone();
            prop_assert!(RESOURCES.contains(&call.resource) || call.resource == "other"
                || work.iter().any(|(plural, status)| call.resource == *plural || call.resource == *status));
        }
    }
}
