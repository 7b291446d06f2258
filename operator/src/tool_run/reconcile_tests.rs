//! The order of a tool run reconcile's calls against a scripted API server
//! (a mock only for the order; the behaviour is tested on the real one):
//! admit, a status written under a precondition, cancel, a foreign Job.

use std::sync::Arc;

use kube::runtime::reflector;
use mining_api::ownership::OwnershipKeys;
use mining_api::testing::{ToolRunExt, tool_run};
use serde_json::{Value, json};

use super::*;
use crate::admission::Budget;
use crate::leader::Leadership;
use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::parties::Parties;
use crate::queue::WorkQueue;
use crate::queue::{Kinds, Proven};
use crate::testing::{Call, Log};
use kube::Client;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::watcher;
use mining_api::annotations;

const RUNS: &str = "/apis/mining-operator.dev/v1alpha1/namespaces/ns/toolruns";
const JOBS: &str = "/apis/batch/v1/namespaces/ns/jobs";
const SECRETS: &str = "/api/v1/namespaces/ns/secrets";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";

/// What the scripted API server holds: the run's Job, if any, and whether
/// a status write meets a newer version (409).
#[derive(Clone, Default)]
struct Script {
    job: Option<Value>,
    status_conflicts: bool,
    /// A Job of the run's name the watch does not select exists: a create is refused (409).
    job_unwatched: bool,
}

fn answer(script: &Script, call: &Call) -> (u16, Value) {
    let not_found =
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"});
    let created = |body: &Value, uid: &str| {
        let mut object = body.clone();
        object["metadata"]["uid"] = json!(uid);
        object
    };
    match call.method.as_str() {
        "GET" if call.path.starts_with(JOBS) => match &script.job {
            Some(job) => (200, job.clone()),
            None => (404, not_found),
        },
        // Two pages: the first says where the second starts.
        "GET" if call.path == PODS && !call.query.contains("continue=") => (
            200,
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"continue": "page-2"}, "items": []}),
        ),
        "GET" if call.path == PODS => {
            (200, json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}))
        }
        "POST" if call.path == SECRETS => (201, created(&call.body, "secret-uid")),
        "POST" if call.path == JOBS && script.job_unwatched => (
            409,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409, "reason": "AlreadyExists"}),
        ),
        "POST" if call.path == JOBS => (201, created(&call.body, "job-uid")),
        "POST" if call.path == EVENTS => (201, call.body.clone()),
        "DELETE" if call.path.starts_with(JOBS) => {
            (200, json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}))
        }
        "PATCH" if call.path.starts_with(RUNS) && call.path.ends_with("/status") => {
            if script.status_conflicts {
                let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409, "reason": "Conflict"});
                return (409, conflict);
            }
            let mut written = serde_json::to_value(run_of(&keys())).unwrap();
            written["metadata"]["resourceVersion"] = json!("8");
            written["status"] = call.body["status"].clone();
            (200, written)
        }
        _ => (404, not_found),
    }
}

fn scripted_client(log: Log, script: Script, metrics: &Metrics) -> Client {
    let counter = crate::api_calls::CountCalls::new(metrics.api_calls.clone());
    crate::testing::counted_scripted_client(log, move |call: &Call| answer(&script, call), Some(counter))
}

fn keys() -> OwnershipKeys {
    OwnershipKeys::new(vec![4; 32], None).unwrap()
}

/// A waiting run the frontend proved, as the cache holds it (version 7).
fn run_of(keys: &OwnershipKeys) -> ToolRun {
    let mut run = tool_run("mw-run", "sum").with_caller("alice");
    run.metadata.resource_version = Some("7".into());
    let proof = keys.proof(&run);
    run.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), proof)].into());
    run
}

struct Scenario {
    log: Log,
    ctx: Arc<RunShell>,
}

impl Scenario {
    fn new(run: &ToolRun, script: Script) -> Self {
        Self::with_leadership(run, script, Leadership::alone())
    }

    fn with_leadership(run: &ToolRun, script: Script, leadership: Leadership) -> Self {
        Self::build(run, script, leadership, None, false, None)
    }

    /// With `job` already brought by the tool Job watch (its first list done).
    fn with_watched_job(run: &ToolRun, script: Script, job: Job) -> Self {
        Self::build(run, script, Leadership::alone(), Some(job), true, None)
    }

    /// With `job` in the tool Job watch and `pods` in the Pod watch (both listed).
    fn with_watched_job_and_pods(run: &ToolRun, script: Script, job: Job, pods: Vec<Pod>) -> Self {
        Self::build(run, script, Leadership::alone(), Some(job), true, Some(pods))
    }

    /// With the tool Job watch's first list done (and no Job of the run in it).
    fn with_synced_watch(run: &ToolRun, script: Script) -> Self {
        Self::build(run, script, Leadership::alone(), None, true, None)
    }

    fn build(
        run: &ToolRun,
        script: Script,
        leadership: Leadership,
        watched: Option<Job>,
        synced: bool,
        watched_pods: Option<Vec<Pod>>,
    ) -> Self {
        let log = Log::default();
        let metrics = Arc::new(Metrics::default());
        let client = scripted_client(log.clone(), script, &metrics);
        let (runs, mut writer) = reflector::store::<ToolRun>();
        let runs_store = runs.clone();
        writer.apply_watcher_event(&watcher::Event::Apply(run.clone()));
        let (workflows, _) = reflector::store::<mining_api::MiningWorkflow>();
        let mut kinds = Kinds::default();
        kinds.register(workflows, futures::channel::mpsc::unbounded().0, Proven::Any);
        kinds.register(runs, futures::channel::mpsc::unbounded().0, Proven::Only);
        let jobs = {
            let (jobs, mut writer) = reflector::store::<Job>();
            // The watch's first list, when done: what it found, then "done".
            if synced {
                writer.apply_watcher_event(&watcher::Event::Init);
            }
            if let Some(mut job) = watched {
                crate::projection::project_tool_job(&mut job);
                writer.apply_watcher_event(&watcher::Event::InitApply(job));
            }
            if synced {
                writer.apply_watcher_event(&watcher::Event::InitDone);
            }
            jobs
        };
        // The Pod watch: not listed yet unless `watched_pods` says what it found.
        let pods = {
            let (pods, mut writer) = reflector::store::<Pod>();
            if let Some(watched) = watched_pods {
                writer.apply_watcher_event(&watcher::Event::Init);
                for mut pod in watched {
                    crate::projection::project_pod(&mut pod);
                    writer.apply_watcher_event(&watcher::Event::InitApply(pod));
                }
                writer.apply_watcher_event(&watcher::Event::InitDone);
            }
            pods
        };
        let mut shared =
            crate::testing::shared(client, kinds, Budget::new(2), Some(keys()), pods, leadership);
        shared.metrics = metrics;
        let ctx = Arc::new(Shell::new(shared, runs_store, jobs, ToolContext::default()));
        Self { log, ctx }
    }

    async fn reconcile(&self, run: &ToolRun) -> Requeue {
        crate::work::reconcile(Arc::new(run.clone()), self.ctx.clone()).await.expect("the reconcile succeeds")
    }

    /// "METHOD path" of each call, Events left out (they go out on a task).
    fn calls(&self) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|c| c.path != EVENTS)
            .map(|c| {
                format!("{} {}", c.method, c.path.trim_start_matches("/apis").trim_start_matches("/api"))
            })
            .collect()
    }

    /// The reasons of the Events published so far (they go out on a task:
    /// waited for, at most 5 s, until `reason` is among them).
    async fn events_until(&self, reason: &str) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let reasons: Vec<String> = {
                let log = self.log.lock().unwrap();
                log.iter()
                    .filter(|c| c.path == EVENTS)
                    .filter_map(|c| c.body["reason"].as_str().map(str::to_string))
                    .collect()
            };
            if reasons.iter().any(|r| r == reason) || tokio::time::Instant::now() >= deadline {
                return reasons;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    fn status_write(&self) -> Call {
        let log = self.log.lock().unwrap();
        log.iter()
            .find(|c| c.method == "PATCH" && c.path.ends_with("/status"))
            .cloned()
            .expect("a status write")
    }
}

#[tokio::test]
async fn an_admitted_run_gets_its_secret_then_its_job_then_a_preconditioned_status() {
    let run = run_of(&keys());
    let scenario = Scenario::new(&run, Script::default());
    scenario.reconcile(&run).await;
    assert_eq!(
        scenario.calls(),
        [
            "GET /batch/v1/namespaces/ns/jobs/mw-run",
            "POST /v1/namespaces/ns/secrets",
            "POST /batch/v1/namespaces/ns/jobs",
            "PATCH /mining-operator.dev/v1alpha1/namespaces/ns/toolruns/mw-run/status",
        ]
    );
    let write = scenario.status_write();
    // Lost guarantee 1: a server-side apply under the operator's field
    // manager, only on the version the plan was made from.
    assert_eq!(write.body["metadata"]["resourceVersion"], "7", "{:#}", write.body);
    assert!(write.query.contains("fieldManager=mining-operator"), "{}", write.query);
    assert_eq!(write.body["status"]["phase"], "Running");
    assert_eq!(write.body["status"]["jobUid"], "job-uid");
    // The queue counts what was written, whatever the cache says.
    let standings = scenario.ctx.queue.memory.written_standings();
    assert_eq!(standings["uid-mw-run"].phase, mining_api::Lifecycle::Active);
}

#[tokio::test]
async fn a_run_that_waited_tells_its_start_as_an_event() {
    // Lost guarantee 8: what happened is an Event on the run.
    let mut run = run_of(&keys());
    run.status = Some(ToolRunStatus { phase: Some(ToolRunPhase::Pending), ..Default::default() });
    let scenario = Scenario::new(&run, Script::default());
    scenario.reconcile(&run).await;
    let events = scenario.events_until(reasons::RUN_STARTED).await;
    assert_eq!(events, [reasons::RUN_STARTED]);
}

#[test]
fn events_tell_a_wait_a_start_after_one_the_end_and_every_warning() {
    let status = |phase| ToolRunStatus { phase: Some(phase), ..Default::default() };
    let reason = |before, phase| event_for(before, &status(phase)).map(|event| event.reason);
    assert_eq!(reason(None, ToolRunPhase::Running), None, "admitted at once: its end says it all");
    assert_eq!(reason(None, ToolRunPhase::Pending), Some(reasons::QUEUED));
    assert_eq!(reason(Some(ToolRunPhase::Pending), ToolRunPhase::Running), Some(reasons::RUN_STARTED));
    assert_eq!(reason(Some(ToolRunPhase::Running), ToolRunPhase::Running), None, "no change, no Event");
    assert_eq!(reason(Some(ToolRunPhase::Running), ToolRunPhase::Succeeded), Some(reasons::RUN_SUCCEEDED));
    let failed = event_for(None, &status(ToolRunPhase::Failed)).unwrap();
    assert!(failed.warning && failed.reason == reasons::RUN_FAILED);
}

#[tokio::test]
async fn a_status_write_that_meets_a_newer_version_is_planned_again_and_counts_nothing() {
    let run = run_of(&keys());
    let scenario = Scenario::new(&run, Script { status_conflicts: true, ..Script::default() });
    let requeue = scenario.reconcile(&run).await;
    assert_eq!(requeue, Requeue::requeue(REPLAN_AFTER));
    assert!(scenario.ctx.queue.memory.written_standings().is_empty());
}

#[tokio::test]
async fn a_cancelled_run_stops_its_job_before_its_status_says_so() {
    let mut run = run_of(&keys());
    run.spec.cancel = true;
    run.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Running),
        job_uid: Some("job-uid".into()),
        ..Default::default()
    });
    let job = serde_json::to_value(controlled_job(&run, json!({"active": 1}))).unwrap();
    let scenario = Scenario::new(&run, Script { job: Some(job), ..Script::default() });
    scenario.reconcile(&run).await;
    let calls = scenario.calls();
    // Lost guarantee 5: the run's Pods are listed a page at a time.
    let pod_pages: Vec<String> = {
        let log = scenario.log.lock().unwrap();
        log.iter().filter(|c| c.path == PODS).map(|c| c.query.clone()).collect()
    };
    assert_eq!(pod_pages.len(), 2, "{pod_pages:?}");
    assert!(pod_pages.iter().all(|q| q.contains(&format!("limit={POD_PAGE_SIZE}"))), "{pod_pages:?}");
    assert!(pod_pages[1].contains("continue=page-2"), "{pod_pages:?}");
    let delete = calls.iter().position(|c| c.starts_with("DELETE /batch/v1/namespaces/ns/jobs/mw-run"));
    let status = calls.iter().position(|c| c.ends_with("/status"));
    assert!(delete.is_some() && delete < status, "{calls:#?}");
    assert_eq!(scenario.status_write().body["status"]["phase"], "Cancelled");
}

#[test]
fn a_job_is_asked_for_its_pods_only_once_it_says_it_made_one() {
    let with_status = |status: Value| -> Job {
        serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "status": status}))
        .unwrap()
    };
    assert!(!has_made_pods(&with_status(json!(null))), "just created");
    assert!(!has_made_pods(&with_status(json!({"active": 0}))));
    assert!(has_made_pods(&with_status(json!({"active": 1}))));
    assert!(has_made_pods(&with_status(json!({"succeeded": 1}))));
    assert!(has_made_pods(&with_status(json!({"failed": 2}))));
    let failed_early = json!({"conditions": [{"type": "Failed", "status": "True"}]});
    assert!(has_made_pods(&with_status(failed_early)), "its reason is still read");
}

#[tokio::test]
async fn a_job_the_run_does_not_control_fails_the_run_and_is_left_alone() {
    let run = run_of(&keys());
    let planted = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "mw-run", "namespace": "ns", "uid": "planted"},
        "spec": {"template": {"spec": {"containers": [{"name": "x", "image": "attacker"}]}}}});
    let scenario = Scenario::new(&run, Script { job: Some(planted), ..Script::default() });
    scenario.reconcile(&run).await;
    let calls = scenario.calls();
    assert!(!calls.iter().any(|c| c.starts_with("DELETE") || c.starts_with("POST")), "{calls:#?}");
    assert_eq!(scenario.status_write().body["status"]["phase"], "Failed");
}

#[tokio::test]
async fn a_standby_asks_nothing_and_waits_to_be_woken_instead_of_polling() {
    // Lost guarantee 7: a standby used to look at every run every 5 s.
    let run = run_of(&keys());
    let scenario = Scenario::with_leadership(&run, Script::default(), Leadership::standby());
    assert_eq!(scenario.reconcile(&run).await, Requeue::await_change());
    assert!(scenario.log.lock().unwrap().is_empty(), "a standby makes no API call");
    // Leading, it is woken with every workflow and run (`wake_all`).
    let (workflows_tx, mut workflows_rx) = futures::channel::mpsc::unbounded();
    let (runs_tx, mut runs_rx) = futures::channel::mpsc::unbounded();
    let (workflows, _) = reflector::store::<mining_api::MiningWorkflow>();
    let (runs, mut writer) = reflector::store::<ToolRun>();
    writer.apply_watcher_event(&watcher::Event::Apply(run.clone()));
    let mut kinds = Kinds::default();
    kinds.register(workflows, workflows_tx, Proven::Any);
    kinds.register(runs, runs_tx, Proven::Only);
    let queue = WorkQueue::new(kinds, Parties::new(None), Arc::new(Memory::default()), Budget::new(1));
    queue.wake_all();
    let woken = runs_rx.try_recv().expect("a run is woken");
    assert_eq!(woken.name, "mw-run");
    assert!(workflows_rx.try_recv().is_err(), "no workflow is stored, none is woken");
}

#[tokio::test]
async fn a_reconcile_is_counted_with_every_api_call_it_made() {
    // Lost guarantee 8: a run's reconciles are counted and their API calls
    // measured, as a workflow's are.
    let _subscriber = tracing::subscriber::set_default(tracing_subscriber::Registry::default());
    let run = run_of(&keys());
    let scenario = Scenario::new(&run, Script::default());
    scenario.reconcile(&run).await;
    let made = scenario.calls().len();
    assert_eq!(made, 4, "{:?}", scenario.calls());
    let metrics = scenario.ctx.metrics.encode();
    let line = |name: &str| {
        metrics
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
            .rsplit_once(' ')
            .map(|(_, value)| value.parse::<f64>().unwrap())
            .unwrap()
    };
    assert_eq!(line("mining_operator_reconciles_total"), 1.0);
    assert_eq!(line("mining_operator_api_calls_per_reconcile_count"), 1.0);
    assert_eq!(line("mining_operator_api_calls_per_reconcile_sum"), made as f64, "every call counted");
    let patched = r#"mining_operator_api_calls_total{verb="patch",resource="toolruns/status"}"#;
    assert_eq!(line(patched), 1.0, "by verb and resource: {metrics}");
}

/// The run's Job as the Job controller keeps it, with `status`.
fn controlled_job(run: &ToolRun, status: Value) -> Job {
    let mut job = serde_json::to_value(job::job_for_run(run, None).unwrap()).unwrap();
    job["metadata"]["uid"] = json!("job-uid");
    job["metadata"]["namespace"] = json!("ns");
    job["metadata"]["ownerReferences"] = json!([{"apiVersion": "mining-operator.dev/v1alpha1",
        "kind": "ToolRun", "name": "mw-run", "uid": "uid-mw-run", "controller": true}]);
    job["status"] = status;
    serde_json::from_value(job).unwrap()
}

mod watches;
