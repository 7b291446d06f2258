//! A third kind of work, made up for this test as kueue tests its job
//! framework with a made-up kind: `Sleep`, one Job that sleeps. It is
//! compiled only here, registered with one line beside workflows and tool
//! runs, and runs through the operator's real shell (`mining_operator::work`)
//! against the local cluster: it waits in the one queue beside the other
//! kinds (and they wait behind it), is cancelled, is retained and deleted,
//! and each change of its status is written once.
//!
//! What the kind needed, besides this file's test: its type and CRD, its
//! `Work` (the API crate's generic view), its `WorkKind` (the reconcile:
//! observe, plan, apply) and its line in the registry — all below.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cluster_tests::{TestNamespace, client, eventually, install_crd, shell_image};
use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{CustomResource, Resource as _, ResourceExt as _};
use mining_api::admitted::Reads;
use mining_api::{Lifecycle, ProofVersion};
use mining_api::{MiningWorkflow, Work, WorkflowPhase};
use mining_operator::queue::Proven;
use mining_operator::work::{Outcome, REPLAN_AFTER, Recorded, Shell, WorkKind};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A Job that sleeps for `seconds`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "test.mining-operator.dev",
    version = "v1",
    kind = "Sleep",
    namespaced,
    status = "SleepStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct SleepSpec {
    seconds: u32,
    #[serde(default)]
    cancel: bool,
    ttl_seconds_after_finished: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SleepStatus {
    phase: Option<String>,
    message: Option<String>,
    admitted_at: Option<Time>,
    finished_at: Option<Time>,
}

/// Its CRD, by hand (the kind has no schema to generate one from).
fn crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "sleeps.test.mining-operator.dev"},
        "spec": {
            "group": "test.mining-operator.dev", "scope": "Namespaced",
            "names": {"kind": "Sleep", "plural": "sleeps", "singular": "sleep", "listKind": "SleepList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .expect("the Sleep CRD")
}

impl Work for Sleep {
    const NOUN: &'static str = "sleep";
    const READS: Reads = Reads::Nothing;
    type Request<'a> = &'a SleepSpec;

    fn request(&self) -> &SleepSpec {
        &self.spec
    }

    fn proof_domain(version: ProofVersion) -> &'static str {
        match version {
            ProofVersion::V1 => "sleep",
            ProofVersion::V2 => "sleep-proof/v2",
        }
    }

    fn v1_parts(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }

    fn lifecycle(&self) -> Lifecycle {
        match self.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => Lifecycle::Active,
            Some("Succeeded") => Lifecycle::Succeeded,
            Some("Failed") => Lifecycle::Failed,
            Some("Cancelled") => Lifecycle::Cancelled,
            _ => Lifecycle::Waiting,
        }
    }

    fn cancel_requested(&self) -> bool {
        self.spec.cancel
    }

    fn preemptible(&self) -> bool {
        false
    }

    fn ttl_seconds_after_finished(&self) -> Option<i64> {
        self.spec.ttl_seconds_after_finished
    }

    fn started_at(&self) -> Option<Timestamp> {
        self.admitted_at()
    }

    fn admitted_at(&self) -> Option<Timestamp> {
        self.status.as_ref()?.admitted_at.as_ref().map(|t| t.0)
    }
}

/// The label on a Sleep's Job (what its Job watch selects).
const SLEEP_LABEL: &str = "test.mining-operator.dev/sleep";

impl WorkKind for Sleep {
    type Context = ();
    const CONCURRENCY: u16 = 4;
    const PAGE_SIZE: u32 = 20;
    const PROVEN: Proven = Proven::Any;

    fn jobs_selector() -> String {
        SLEEP_LABEL.into()
    }

    fn project_job(_job: &mut Job) {}

    fn span(&self) -> tracing::Span {
        tracing::info_span!("reconcile", sleep = %self.name_any(), trace_id = tracing::field::Empty)
    }

    fn reconcile<'a>(&'a self, shell: &'a Shell<Self>) -> BoxFuture<'a, mining_operator::Result<Outcome>> {
        reconcile(self, shell).boxed()
    }

    fn refused_status(&self, why: &str, now: Timestamp) -> (SleepStatus, String) {
        (ended(self, "Failed", why, now), why.to_string())
    }
}

fn ended(sleep: &Sleep, phase: &str, message: &str, now: Timestamp) -> SleepStatus {
    SleepStatus {
        phase: Some(phase.into()),
        message: Some(message.into()),
        finished_at: Some(Time(now)),
        ..sleep.status.clone().unwrap_or_default()
    }
}

fn failed_call<'a>(
    action: &'static str,
    name: &'a str,
) -> impl FnOnce(kube::Error) -> mining_operator::Error + 'a {
    move |source| mining_operator::Error::Work { noun: Sleep::NOUN, action, name: name.to_string(), source }
}

/// Observe (its Job in the watch), plan, apply — the kind's whole reconcile.
async fn reconcile(sleep: &Sleep, shell: &Shell<Sleep>) -> mining_operator::Result<Outcome> {
    let (name, namespace) = (sleep.name_any(), sleep.namespace().unwrap_or_default());
    let jobs: Api<Job> = Api::namespaced(shell.client.clone(), &namespace);
    let job = shell.jobs.get(&ObjectRef::new(&name).within(&namespace));
    let now = Timestamp::now();
    let write = |status: SleepStatus| async move {
        if sleep.status.as_ref() == Some(&status) {
            return Ok(Recorded::Written);
        }
        shell.record_status(sleep, &status).await
    };
    if sleep.is_finished() {
        let ttl = sleep.ttl_seconds_after_finished().unwrap_or(shell.default_ttl_seconds as i64);
        let finished = sleep.status.as_ref().and_then(|s| s.finished_at.as_ref()).map_or(now, |t| t.0);
        let left = finished.as_second() + ttl - now.as_second();
        if left > 0 {
            return Ok(Outcome::after(Duration::from_secs(left as u64)));
        }
        let sleeps: Api<Sleep> = Api::namespaced(shell.client.clone(), &namespace);
        match sleeps.delete(&name, &DeleteParams::background()).await {
            Ok(_) | Err(kube::Error::Api(_)) => return Ok(Outcome::AWAIT_CHANGE),
            Err(err) => return Err(failed_call("delete", &name)(err)),
        }
    }
    if sleep.cancel_requested() {
        if job.is_some() {
            match jobs.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(failed_call("delete the Job of", &name)(err)),
            }
        }
        return match write(ended(sleep, "Cancelled", "cancelled", now)).await? {
            Recorded::Conflict => Ok(Outcome::after(REPLAN_AFTER)),
            Recorded::Written | Recorded::Refused => Ok(Outcome::AWAIT_CHANGE),
        };
    }
    if sleep.lifecycle() == Lifecycle::Active {
        let holds = |type_: &str| {
            let conditions = job.as_ref().and_then(|j| j.status.as_ref()).and_then(|s| s.conditions.clone());
            conditions.unwrap_or_default().iter().any(|c| c.type_ == type_ && c.status == "True")
        };
        let status = match () {
            _ if holds("Complete") => ended(sleep, "Succeeded", "slept", now),
            _ if holds("Failed") => ended(sleep, "Failed", "its Job failed", now),
            _ => return Ok(Outcome::AWAIT_CHANGE),
        };
        return match write(status).await? {
            Recorded::Conflict => Ok(Outcome::after(REPLAN_AFTER)),
            Recorded::Written | Recorded::Refused => Ok(Outcome::AWAIT_CHANGE),
        };
    }
    // Waiting: the one queue says whether a slot is free for it.
    let (slots, reservation) = shell.admission(sleep);
    if !slots.admits() {
        drop(reservation);
        let status = SleepStatus {
            phase: Some("Pending".into()),
            message: Some(slots.queued_message("sleeps")),
            ..Default::default()
        };
        return match write(status).await? {
            Recorded::Conflict => Ok(Outcome::after(REPLAN_AFTER)),
            Recorded::Written | Recorded::Refused => Ok(Outcome { requeue: None, waited: Some(slots) }),
        };
    }
    let status = SleepStatus {
        phase: Some("Running".into()),
        message: Some(format!("sleeping {} s", sleep.spec.seconds)),
        admitted_at: Some(Time(now)),
        finished_at: None,
    };
    match write(status).await? {
        Recorded::Written => {}
        Recorded::Conflict => return Ok(Outcome::after(REPLAN_AFTER)),
        Recorded::Refused => return Ok(Outcome::AWAIT_CHANGE),
    }
    drop(reservation);
    let owner = sleep.controller_owner_ref(&()).expect("a stored Sleep has a uid");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {SLEEP_LABEL: "true"}, "ownerReferences": [owner]},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "sleep", "image": shell_image(), "command": ["sh", "-c", format!("sleep {}", sleep.spec.seconds)],
        }]}}},
    }))
    .expect("a Job");
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => Ok(Outcome { requeue: None, waited: Some(slots) }),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Outcome::AWAIT_CHANGE),
        Err(err) => Err(failed_call("create the Job of", &name)(err)),
    }
}

async fn install_sleep_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => panic!("installing the Sleep CRD: {err}"),
    }
    let sleeps: Api<Sleep> = Api::all(client.clone());
    eventually("Sleeps to be served", Duration::from_secs(30), || async {
        sleeps.list(&kube::api::ListParams::default().limit(1)).await.ok().map(|_| ())
    })
    .await;
}

fn phase_of(sleep: Option<&Sleep>) -> Option<String> {
    sleep?.status.as_ref()?.phase.clone()
}

async fn wait_sleep(
    api: &Api<Sleep>,
    name: &str,
    what: &str,
    check: impl Fn(Option<&Sleep>) -> bool,
) -> Option<Sleep> {
    eventually(&format!("sleep {name}: {what}"), Duration::from_secs(120), || async {
        let sleep = api.get_opt(name).await.ok()?;
        check(sleep.as_ref()).then_some(sleep)
    })
    .await
}

async fn wait_workflow(api: &Api<MiningWorkflow>, name: &str, check: impl Fn(WorkflowPhase, &str) -> bool) {
    eventually(&format!("workflow {name}"), Duration::from_secs(120), || async {
        let workflow = api.get(name).await.ok()?;
        let message = workflow.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_default();
        check(workflow.phase(), &message).then_some(())
    })
    .await
}

fn workflow(name: &str, blocks: u32) -> MiningWorkflow {
    serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
        "metadata": {"name": name}, "spec": {"difficulty": 1, "blocks": blocks},
    }))
    .expect("a workflow")
}

async fn cancel<
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
>(
    api: &Api<K>,
    name: &str,
) {
    let patch = Patch::Merge(json!({"spec": {"cancel": true}}));
    api.patch(name, &PatchParams::default(), &patch).await.expect("cancel");
}

/// The patches of `resource` the operator made, from its own counters.
fn patches(metrics: &mining_operator::metrics::Metrics, resource: &str) -> f64 {
    let series = format!(r#"mining_operator_api_calls_total{{verb="patch",resource="{resource}"}}"#);
    let text = metrics.encode();
    text.lines()
        .find(|line| line.starts_with(&series))
        .and_then(|line| line.rsplit_once(' ')?.1.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_kind_runs_through_the_one_shell_beside_the_other_two() {
    let client = client().await;
    install_crd(&client).await;
    install_sleep_crd(&client).await;
    let ns = TestNamespace::new("third-kind").await;
    // The operator in this process: the two kinds it ships and `Sleep`, one
    // slot for all of them.
    let config = <mining_operator::config::Config as clap::Parser>::parse_from([
        "operator",
        "--namespace",
        &ns.name,
        "--max-concurrent-work",
        "1",
        "--miner-image",
        "localhost/mining-operator/miner:dev",
    ]);
    let metrics = Arc::new(mining_operator::metrics::Metrics::default());
    let counter = mining_operator::api_calls::CountCalls::new(metrics.api_calls.clone());
    let kube_config = kube::Config::infer().await.expect("a kubeconfig");
    let counted = mining_operator::api_calls::counted_client(kube_config, counter).expect("a client");
    let ready = Arc::new(AtomicBool::new(false));
    let registered = config.clone();
    let operator = tokio::spawn(mining_operator::work::run(
        counted,
        config,
        None,
        None,
        metrics.clone(),
        ready.clone(),
        move |registry| {
            mining_operator::kinds::register(registry, &registered);
            registry.register::<Sleep>(|_| ());
        },
    ));
    eventually("the operator to be ready (every kind's watches listed)", Duration::from_secs(60), || async {
        ready.load(Ordering::Acquire).then_some(())
    })
    .await;

    let (sleeps, workflows, jobs): (Api<Sleep>, Api<MiningWorkflow>, Api<Job>) =
        (ns.api(), ns.api(), ns.api());
    // A workflow takes the one slot; a Sleep queues behind it.
    workflows.create(&PostParams::default(), &workflow("holder", 64)).await.expect("create holder");
    wait_workflow(&workflows, "holder", |phase, _| phase == WorkflowPhase::Mining).await;
    let nap = Sleep::new("nap", SleepSpec { seconds: 1, cancel: false, ttl_seconds_after_finished: Some(3) });
    sleeps.create(&PostParams::default(), &nap).await.expect("create nap");
    let queued = wait_sleep(&sleeps, "nap", "queued", |s| phase_of(s).as_deref() == Some("Pending")).await;
    let message = queued.and_then(|s| s.status?.message).unwrap_or_default();
    assert!(message.starts_with("queued:") && message.contains("1 of at most 1"), "{message}");
    assert!(jobs.get_opt("nap").await.unwrap().is_none(), "no Job while it waits");
    // The workflow's slot freed, the Sleep takes it, sleeps, succeeds.
    cancel(&workflows, "holder").await;
    wait_workflow(&workflows, "holder", |phase, _| phase == WorkflowPhase::Cancelled).await;
    wait_sleep(&sleeps, "nap", "succeeded", |s| phase_of(s).as_deref() == Some("Succeeded")).await;
    // Each change written once: Pending, Running, Succeeded.
    assert_eq!(patches(&metrics, "sleeps/status"), 3.0, "one status write per change");
    // Retained for its TTL, then deleted.
    wait_sleep(&sleeps, "nap", "deleted after its TTL", |s| s.is_none()).await;

    // Now a Sleep holds the slot and a workflow queues behind it.
    let long =
        Sleep::new("long", SleepSpec { seconds: 600, cancel: false, ttl_seconds_after_finished: None });
    sleeps.create(&PostParams::default(), &long).await.expect("create long");
    wait_sleep(&sleeps, "long", "running", |s| phase_of(s).as_deref() == Some("Running")).await;
    eventually("the long Sleep's Job", Duration::from_secs(30), || async {
        jobs.get_opt("long").await.ok()?
    })
    .await;
    workflows.create(&PostParams::default(), &workflow("after", 1)).await.expect("create after");
    wait_workflow(&workflows, "after", |phase, message| {
        phase == WorkflowPhase::Pending && message.starts_with("queued:")
    })
    .await;
    // Cancelled: its Job goes, and the queue's next — a workflow — starts.
    cancel(&sleeps, "long").await;
    wait_sleep(&sleeps, "long", "cancelled", |s| phase_of(s).as_deref() == Some("Cancelled")).await;
    eventually("the cancelled Sleep's Job to go", Duration::from_secs(60), || async {
        let job = jobs.get_opt("long").await.ok()?;
        job.is_none_or(|j| j.meta().deletion_timestamp.is_some()).then_some(())
    })
    .await;
    wait_workflow(&workflows, "after", |phase, _| phase != WorkflowPhase::Pending).await;
    operator.abort();
}
