//! Counts the operator's calls to the API server by verb and resource, and
//! per reconcile: the cost the controller puts on the cluster, in `/metrics`.
//!
//! The count is taken in the client's request path (a tower layer), so it
//! covers every call, ours and kube-runtime's watches alike, and cannot drift
//! from the code that makes them.

use std::cell::Cell;

use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// One kind of API call. Both labels come from fixed sets (never from a
/// name in the URL), so the metric's cardinality is bounded.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiCall {
    pub verb: &'static str,
    pub resource: &'static str,
}

/// Resources the operator talks to; anything else is counted as `other`.
const RESOURCES: &[&str] = &["jobs", "pods", "miningworkflows", "events", "leases", "namespaces"];
const SUBRESOURCES: &[(&str, &str)] = &[("miningworkflows", "miningworkflows/status")];

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
    let known = RESOURCES.iter().find(|known| **known == resource).copied().unwrap_or("other");
    let resource = match more.get(1) {
        Some(sub) => SUBRESOURCES
            .iter()
            .find(|(parent, full)| *parent == known && full.ends_with(&format!("/{sub}")))
            .map_or("other", |(_, full)| full),
        None => known,
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

tokio::task_local! {
    /// Calls made so far by the reconcile running in this task.
    static CALLS_IN_RECONCILE: Cell<u64>;
}

/// Runs one reconcile and returns what it returned with the number of API
/// calls it made.
pub async fn counting_calls<F: std::future::Future>(reconcile: F) -> (F::Output, u64) {
    CALLS_IN_RECONCILE
        .scope(Cell::new(0), async move {
            let output = reconcile.await;
            (output, CALLS_IN_RECONCILE.with(Cell::get))
        })
        .await
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
        let _ = CALLS_IN_RECONCILE.try_with(|calls| calls.set(calls.get().saturating_add(1)));
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
        assert_eq!(call(Method::DELETE, "/api/v1/namespaces/a/pods"), ("deletecollection", "pods"));
    }

    #[test]
    fn names_never_become_labels() {
        assert_eq!(call(Method::GET, "/api/v1/namespaces/a/secrets/s"), ("get", "other"));
        assert_eq!(call(Method::GET, "/api/v1/namespaces/a/pods/p/log"), ("get", "other"));
        assert_eq!(call(Method::GET, "/version"), ("list", "other"));
    }

    #[tokio::test]
    async fn a_reconcile_counts_only_its_own_calls() {
        let family = Family::<ApiCall, Counter>::default();
        let counter = CountCalls::new(family.clone());
        let request = Request::get("/api/v1/namespaces/a/pods").body(()).unwrap();
        counter.count(&request); // outside any reconcile
        let ((), calls) = counting_calls(async {
            counter.count(&request);
            counter.count(&request);
        })
        .await;
        assert_eq!(calls, 2);
        assert_eq!(family.get_or_create(&ApiCall { verb: "list", resource: "pods" }).get(), 3);
    }

    proptest! {
        #[test]
        fn any_url_is_classified_into_the_fixed_label_sets(path in "\\PC{0,80}", query in "\\PC{0,40}") {
            let call = classify(&Method::GET, &path, Some(&query));
            prop_assert!(RESOURCES.contains(&call.resource) || call.resource == "other"
                || SUBRESOURCES.iter().any(|(_, full)| *full == call.resource));
        }
    }
}
