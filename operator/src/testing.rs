//! Fixtures for unit tests.

use k8s_openapi::jiff::Timestamp;
pub use mining_api::testing::workflow;

pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

/// The Job the operator builds for block 1 of a 2-block workflow `w` at
/// difficulty 8 (a CPU request of 100m, so resources are compared too).
pub fn built_block_job() -> k8s_openapi::api::batch::v1::Job {
    let job_settings = crate::config::JobSettings {
        backoff_limit: 2,
        active_deadline_seconds: None,
        cpu_request: Some("100m".into()),
        cpu_limit: None,
        memory_request: None,
        memory_limit: None,
        queue_name: None,
    };
    let settings = crate::mining::job::MinerSettings {
        image: "miner:1",
        image_pull_policy: "IfNotPresent",
        pull_secrets: &[],
        threads: 1,
        job: &job_settings,
        otlp: None,
    };
    crate::mining::job::build_block_job(&workflow("w", 8, 2), 1, "GENESIS", 8, &settings)
}

/// One request a scripted API server received.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: serde_json::Value,
}

/// Every request, in order.
pub type Log = std::sync::Arc<std::sync::Mutex<Vec<Call>>>;

/// A client whose API server is `answer` (status code and body per
/// request), recording every request in `log`: the call-order tests of
/// every kind of work share it.
pub fn scripted_client(
    log: Log,
    answer: impl Fn(&Call) -> (u16, serde_json::Value) + Clone + Send + Sync + 'static,
) -> kube::Client {
    counted_scripted_client(log, answer, None)
}

/// [`scripted_client`] with every request counted by `counter` first, as
/// the operator's own client counts them (`api_calls::counted_client`).
pub fn counted_scripted_client(
    log: Log,
    answer: impl Fn(&Call) -> (u16, serde_json::Value) + Clone + Send + Sync + 'static,
    counter: Option<crate::api_calls::CountCalls>,
) -> kube::Client {
    use http::{Request, Response};
    use kube::client::Body;
    let service = tower::service_fn(move |request: Request<Body>| {
        if let Some(counter) = &counter {
            counter.count(&request);
        }
        let (log, answer) = (log.clone(), answer.clone());
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let call = Call {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
            };
            let (code, reply) = answer(&call);
            log.lock().unwrap().push(call);
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    kube::Client::new(service, "ns")
}

/// What every kind shares, as tests build it: one queue over `kinds` (with
/// `budget` and `keys`), the Pod watch `pods`, every watch listed, and a
/// client answering from a script.
pub fn shared(
    client: kube::Client,
    kinds: crate::queue::Kinds,
    budget: crate::admission::Budget,
    keys: Option<mining_api::ownership::OwnershipKeys>,
    pods: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Pod>,
    leadership: crate::leader::Leadership,
) -> crate::work::Shared {
    use std::sync::Arc;
    crate::api_calls::count_work_resource("miningworkflows");
    crate::api_calls::count_work_resource("toolruns");
    let memory = Arc::new(crate::memory::Memory::default());
    let parties = crate::parties::Parties::new(keys.clone());
    let queue = Arc::new(crate::queue::WorkQueue::new(kinds, parties, memory.clone(), budget));
    let readiness = crate::work::Readiness::new(Arc::default());
    readiness.register("everything").saw::<()>(&kube::runtime::watcher::Event::InitDone);
    crate::work::Shared {
        client,
        keys,
        leadership,
        metrics: Arc::new(crate::metrics::Metrics::default()),
        queue,
        memory,
        readiness,
        instance: "operator-0".into(),
        namespace: None,
        default_ttl_seconds: 60,
        pod_start_timeout: std::time::Duration::from_secs(600),
        pods,
        blocked_jobs: tokio::sync::broadcast::channel(1).0,
        queue_name: None,
        outputs: None,
    }
}
