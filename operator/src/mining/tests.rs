//! The order and count of the API calls a reconcile makes, on its main paths,
//! against a scripted API server: a `tower` service that records every
//! request and answers as the API server would. The stores are filled by
//! hand, as the watches would fill them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::*;
use crate::mining::job::job_for_block;
use crate::testing::{Call, Log, workflow};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::ObjectRef;

const WORKFLOWS: &str = "/apis/mining-operator.dev/v1alpha1/namespaces/ns/miningworkflows";
const JOBS: &str = "/apis/batch/v1/namespaces/ns/jobs";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";
const PODS: &str = "/api/v1/namespaces/ns/pods";

/// What the API server answers: the written object back, with a new
/// resourceVersion; 404 for anything a reconcile has no business asking.
fn answer(method: &str, path: &str, body: &Value) -> (u16, Value) {
    match method {
        "PATCH" if path.starts_with(WORKFLOWS) && path.ends_with("/status") => {
            let name = path.trim_start_matches(WORKFLOWS).trim_matches('/').trim_end_matches("/status");
            let written = json!({
                "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": "2"},
                "spec": {"difficulty": 8}, "status": body["status"],
            });
            (200, written)
        }
        "POST" if path == JOBS || path == EVENTS => (201, body.clone()),
        "DELETE" if path.starts_with(JOBS) => {
            (200, json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}))
        }
        _ => (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"}),
        ),
    }
}

fn store_of<K>(objects: Vec<K>) -> Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, mut writer) = reflector::store();
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(object));
    }
    store
}

/// A reconcile of `workflow` with these Jobs and Pods in the caches, and what it asked of the API server.
struct Scenario {
    log: Log,
    ctx: Arc<WorkflowShell>,
    _woken: futures::channel::mpsc::UnboundedReceiver<ObjectRef<MiningWorkflow>>,
}

impl Scenario {
    fn new(workflow: &MiningWorkflow, jobs: Vec<Job>, pods: Vec<Pod>) -> Self {
        Self::answering(workflow, jobs, pods, |call: &Call| answer(&call.method, &call.path, &call.body))
    }

    /// [`Scenario::new`] with an API server that answers as `answer` says.
    fn answering(
        workflow: &MiningWorkflow,
        jobs: Vec<Job>,
        pods: Vec<Pod>,
        answer: impl Fn(&Call) -> (u16, Value) + Clone + Send + Sync + 'static,
    ) -> Self {
        let log = Log::default();
        let (wake, woken) = futures::channel::mpsc::unbounded();
        let store = store_of(vec![workflow.clone()]);
        let (runs, _) = kube::runtime::reflector::store::<mining_api::ToolRun>();
        let mut kinds = crate::queue::Kinds::default();
        kinds.register(store.clone(), wake, crate::queue::Proven::Any);
        kinds.register(runs, futures::channel::mpsc::unbounded().0, crate::queue::Proven::Only);
        let client = crate::testing::scripted_client(log.clone(), answer);
        let leading = crate::leader::Leadership::alone();
        let shared =
            crate::testing::shared(client, kinds, config().limits.budget(), None, store_of(pods), leading);
        let ctx = Arc::new(Shell::new(shared, store, store_of(jobs), Context { config: config() }));
        Self { log, ctx, _woken: woken }
    }

    async fn reconcile(&self, workflow: &MiningWorkflow) -> Requeue {
        crate::work::reconcile(Arc::new(workflow.clone()), self.ctx.clone())
            .await
            .expect("the reconcile succeeds")
    }

    /// The calls made on the reconcile's own path, in order: every call but Events.
    fn calls(&self) -> Vec<(String, String)> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|c| c.path != EVENTS).map(|c| (c.method.clone(), c.path.clone())).collect()
    }

    fn bodies(&self, method: &str, path: &str) -> Vec<Value> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|c| c.method == method && c.path == path).map(|c| c.body.clone()).collect()
    }

    /// Waits for the Events (they go out off the reconcile's path) until
    /// `reasons` were all recorded; returns every reason recorded.
    async fn events(&self, reasons: &[&str]) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let seen: Vec<String> = (self.bodies("POST", EVENTS).iter())
                .map(|event| event["reason"].as_str().unwrap_or_default().to_string())
                .collect();
            if reasons.iter().all(|r| seen.iter().any(|s| s == r)) {
                return seen;
            }
            assert!(tokio::time::Instant::now() < deadline, "Events {reasons:?} never came; saw {seen:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn config() -> Config {
    <Config as clap::Parser>::parse_from(["operator", "--miner-image", "miner:test"])
}

fn settings(config: &Config) -> MinerSettings<'_> {
    MinerSettings {
        image: &config.miner_image,
        image_pull_policy: &config.miner_image_pull_policy,
        pull_secrets: &config.miner_image_pull_secrets,
        threads: config.miner_threads,
        job: &config.job,
        otlp: None,
    }
}

/// `workflow` as it is once the operator admitted it (its first plan's status written).
fn admitted(workflow: MiningWorkflow) -> MiningWorkflow {
    let config = config();
    let observed = Observed {
        workflow: &workflow,
        jobs: Default::default(),
        ranges: Default::default(),
        slots: crate::admission::Slots {
            taken: 0,
            limit: 2,
            ahead: 0,
            binding: crate::admission::Limit::Kind,
        },
        yielding: crate::admission::Yield::Keep,
        waiting_for_node: None,
        give_way: None,
        now: Timestamp::now(),
    };
    let status = plan(&observed, &config.limits).status;
    MiningWorkflow { status: Some(status), ..workflow }
}

/// The Job the operator builds for `block`, as the API server stores it.
fn stored_job(workflow: &MiningWorkflow, block: u32) -> Job {
    let config = config();
    let mut job = job_for_block(workflow, block, None, &settings(&config)).expect("a block Job");
    job.metadata.namespace = Some("ns".into());
    job.metadata.uid = Some(format!("job-uid-{block}"));
    job
}

fn completed(mut job: Job) -> Job {
    let condition = JobCondition { type_: "Complete".into(), status: "True".into(), ..Default::default() };
    job.status = Some(JobStatus { conditions: Some(vec![condition]), ..Default::default() });
    job
}

/// The Job's Pod, succeeded with `message` as its termination message.
fn succeeded_pod(job: &Job, message: String) -> Pod {
    let mut pod = Pod { spec: job.spec.clone().unwrap().template.spec, ..Default::default() };
    pod.metadata.name = Some(format!("{}-pod", job.metadata.name.clone().unwrap()));
    pod.metadata.namespace = Some("ns".into());
    pod.metadata.labels = Some([("job-name".to_string(), job.metadata.name.clone().unwrap())].into());
    pod.metadata.owner_references = Some(vec![OwnerReference {
        controller: Some(true),
        uid: job.metadata.uid.clone().unwrap(),
        ..Default::default()
    }]);
    let terminated = ContainerStateTerminated { exit_code: 0, message: Some(message), ..Default::default() };
    pod.status = Some(PodStatus {
        phase: Some("Succeeded".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "miner".into(),
            state: Some(ContainerState { terminated: Some(terminated), ..Default::default() }),
            ..Default::default()
        }]),
        ..Default::default()
    });
    pod
}

/// Block 1 mined for real, as the miner reports it.
fn block_one_result(difficulty: u32) -> String {
    let found = miner::mine_block(1, mining_api::GENESIS, difficulty, 1).unwrap();
    miner::block_result(1, mining_api::GENESIS, difficulty, &found, 1).to_json_line()
}

fn call(method: &str, path: impl Into<String>) -> (String, String) {
    (method.to_string(), path.into())
}

#[tokio::test(flavor = "multi_thread")]
async fn admitting_writes_the_status_before_creating_the_first_blocks_job() {
    let new = workflow("w", 8, 2);
    let scenario = Scenario::new(&new, vec![], vec![]);
    scenario.reconcile(&new).await;
    assert_eq!(scenario.calls(), [call("PATCH", format!("{WORKFLOWS}/w/status")), call("POST", JOBS)]);
    let status = &scenario.bodies("PATCH", &format!("{WORKFLOWS}/w/status"))[0]["status"];
    assert_eq!((status["phase"].as_str(), status["currentBlock"].as_u64()), (Some("Mining"), Some(1)));
    let job = &scenario.bodies("POST", JOBS)[0];
    assert_eq!(job["metadata"]["labels"][mining_api::labels::BLOCK], "1");
    // Starting on creation is no news: no Event, so a block costs one write and one create.
    assert_eq!(scenario.events(&[]).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mined_block_is_recorded_before_the_next_blocks_job_is_created() {
    let mining = admitted(workflow("w", 8, 2));
    let job = completed(stored_job(&mining, 1));
    let pod = succeeded_pod(&job, block_one_result(8));
    let scenario = Scenario::new(&mining, vec![job], vec![pod]);
    scenario.reconcile(&mining).await;
    // The result came from the Pod cache: no list of Pods, one write, one create.
    assert_eq!(scenario.calls(), [call("PATCH", format!("{WORKFLOWS}/w/status")), call("POST", JOBS)]);
    let status = &scenario.bodies("PATCH", &format!("{WORKFLOWS}/w/status"))[0]["status"];
    assert_eq!(status["blocks"].as_array().map(Vec::len), Some(1), "{status:#}");
    let next = &scenario.bodies("POST", JOBS)[0];
    assert_eq!(next["metadata"]["labels"][mining_api::labels::BLOCK], "2");
    // The block is in the status; no Event per block.
    assert_eq!(scenario.events(&[]).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_last_block_finishes_with_one_status_write_and_no_job() {
    let mining = admitted(workflow("w", 8, 1));
    let job = completed(stored_job(&mining, 1));
    let pod = succeeded_pod(&job, block_one_result(8));
    let scenario = Scenario::new(&mining, vec![job], vec![pod]);
    scenario.reconcile(&mining).await;
    assert_eq!(scenario.calls(), [call("PATCH", format!("{WORKFLOWS}/w/status"))]);
    let status = &scenario.bodies("PATCH", &format!("{WORKFLOWS}/w/status"))[0]["status"];
    assert_eq!(status["phase"], "Succeeded");
    assert_eq!(scenario.events(&[reasons::SUCCEEDED]).await, [reasons::SUCCEEDED]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_deletes_the_running_job_before_saying_cancelled() {
    let mut mining = admitted(workflow("w", 8, 2));
    let running = stored_job(&mining, 1);
    let job_name = running.metadata.name.clone().unwrap();
    mining.spec.cancel = true;
    let scenario = Scenario::new(&mining, vec![running], vec![]);
    scenario.reconcile(&mining).await;
    assert_eq!(
        scenario.calls(),
        [call("DELETE", format!("{JOBS}/{job_name}")), call("PATCH", format!("{WORKFLOWS}/w/status"))]
    );
    let status = &scenario.bodies("PATCH", &format!("{WORKFLOWS}/w/status"))[0]["status"];
    assert_eq!(status["phase"], "Cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_job_fails_the_workflow_and_nothing_of_it_is_read() {
    let mining = admitted(workflow("w", 8, 2));
    let mut planted = completed(stored_job(&mining, 1));
    let template = planted.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    template.containers[0].image = Some("evil:1".into());
    let pod = succeeded_pod(&planted, block_one_result(8));
    let scenario = Scenario::new(&mining, vec![planted], vec![pod]);
    scenario.reconcile(&mining).await;
    // No Pod list, no Job created: one status write.
    assert_eq!(scenario.calls(), [call("PATCH", format!("{WORKFLOWS}/w/status"))]);
    let status = &scenario.bodies("PATCH", &format!("{WORKFLOWS}/w/status"))[0]["status"];
    assert_eq!(status["phase"], "Failed");
    assert!(status["blocks"].as_array().is_none_or(Vec::is_empty), "nothing of it was recorded: {status:#}");
    scenario.events(&[reasons::FOREIGN_JOB]).await;
}

/// Drift #62 found: a finished block's Pods were listed in one unpaged call
/// (anyone can create Pods with its Job's name), while tool runs paged theirs.
#[tokio::test(flavor = "multi_thread")]
async fn a_finished_blocks_pods_are_read_a_page_at_a_time() {
    let mining = admitted(workflow("w", 8, 2));
    let job = completed(stored_job(&mining, 1));
    let listed = serde_json::to_value(succeeded_pod(&job, block_one_result(8))).unwrap();
    // The Pod watch does not have it yet: the reconcile reads it live.
    let scenario = Scenario::answering(&mining, vec![job], vec![], move |call: &Call| {
        if call.method == "GET" && call.path == PODS {
            let list =
                json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [listed.clone()]});
            return (200, list);
        }
        answer(&call.method, &call.path, &call.body)
    });
    scenario.reconcile(&mining).await;
    let lists: Vec<Call> = scenario
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.method == "GET" && c.path == PODS)
        .cloned()
        .collect();
    assert_eq!(lists.len(), 1, "{lists:?}");
    let limit = format!("limit={}", crate::work::pods::POD_PAGE_SIZE);
    assert!(lists[0].query.split('&').any(|part| part == limit), "a page at a time: {}", lists[0].query);
    let status = &scenario.bodies("PATCH", &format!("{WORKFLOWS}/w/status"))[0]["status"];
    assert_eq!(
        status["blocks"].as_array().map(Vec::len),
        Some(1),
        "the block was read from the page: {status:#}"
    );
}

/// Drift #62 found: a status the API server will never store (413, 400)
/// failed a tool run but left a workflow retrying for ever (only 422 ended it).
#[tokio::test(flavor = "multi_thread")]
async fn a_status_refused_for_good_ends_the_workflow_whatever_the_code() {
    for code in [400, 413, 422] {
        let mining = admitted(workflow("w", 8, 2));
        let job = completed(stored_job(&mining, 1));
        let pod = succeeded_pod(&job, block_one_result(8));
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let scenario = Scenario::answering(&mining, vec![job], vec![pod], move |call: &Call| {
            let status_write = call.method == "PATCH" && call.path.ends_with("/status");
            if status_write && !refused.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let refusal = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                    "message": "request entity too large"});
                return (code, refusal);
            }
            answer(&call.method, &call.path, &call.body)
        });
        assert_eq!(scenario.reconcile(&mining).await, Requeue::await_change(), "code {code}");
        let written = scenario.bodies("PATCH", &format!("{WORKFLOWS}/w/status"));
        assert_eq!(written.len(), 2, "the plan's status, then the one that ends it (code {code})");
        assert_eq!(written[1]["status"]["phase"], "Failed", "code {code}");
        let message = written[1]["status"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("request entity too large"), "code {code}: {message}");
        assert!(scenario.bodies("POST", JOBS).is_empty(), "no next block after a refused status");
        scenario.events(&[reasons::STATUS_REJECTED]).await;
    }
}

/// Drift #62 found: readiness (and so every admission) waited for the
/// workflow and Job watches only, so right after a start a workflow could
/// be admitted while the tool runs holding slots were not listed yet.
#[tokio::test(flavor = "multi_thread")]
async fn nothing_is_reconciled_until_every_registered_watch_has_listed() {
    let new = workflow("w", 8, 2);
    let scenario = Scenario::new(&new, vec![], vec![]);
    let mut shared = scenario.ctx.shared.clone();
    shared.readiness = crate::work::Readiness::new(Default::default());
    let listed = shared.readiness.register(mining_api::MiningWorkflow::NOUN);
    listed.saw::<MiningWorkflow>(&watcher::Event::InitDone);
    let runs = shared.readiness.register(mining_api::ToolRun::NOUN);
    let shell = Arc::new(Shell::new(
        shared,
        scenario.ctx.store.clone(),
        store_of(vec![]),
        Context { config: config() },
    ));
    let requeue = crate::work::reconcile(Arc::new(new.clone()), shell.clone()).await.unwrap();
    assert_eq!(requeue, Requeue::requeue(Duration::from_millis(100)));
    assert!(scenario.log.lock().unwrap().is_empty(), "no call, no admission before the tool runs are listed");
    runs.saw::<mining_api::ToolRun>(&watcher::Event::InitDone);
    crate::work::reconcile(Arc::new(new), shell).await.unwrap();
    assert_eq!(
        scenario.calls()[0],
        call("PATCH", format!("{WORKFLOWS}/w/status")),
        "admitted once all listed"
    );
}
