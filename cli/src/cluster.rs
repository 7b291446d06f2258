//! The CLI's reads and writes against the API server: thin, with the
//! user's own credentials (their RBAC decides what they see and may do).

use std::collections::HashSet;
use std::time::Duration;

use futures::{AsyncBufReadExt as _, StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt as _};
use mining_api::provenance::{controlled_by, is_jobs_pod};
use mining_api::{MiningWorkflow, ToolRun};
use serde::de::DeserializeOwned;

use crate::error::CliError;
use crate::render::{JobLine, PodLine};
use crate::view::{Kind, WorkView};

/// Items asked for per page of a list: a namespace of many thousand runs
/// is read in pieces, never in one answer.
const PAGE: u32 = 500;

/// Where to look: one namespace or all the user may list.
#[derive(Clone, Debug)]
pub enum Scope {
    Namespace(String),
    All,
}

fn api<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match scope {
        Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
        Scope::All => Api::all(client.clone()),
    }
}

/// Every object of a kind in `scope` matching `params`, page by page.
async fn list_all<K>(api: &Api<K>, params: ListParams) -> Result<Vec<K>, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(PAGE);
    let mut all = Vec::new();
    loop {
        let page = api.list(&params).await?;
        all.extend(page.items);
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(all),
        }
    }
}

/// The workflows and runs in `scope` of the kinds asked for, newest first.
pub async fn list(client: &Client, scope: &Scope, kinds: &[Kind]) -> Result<Vec<WorkView>, CliError> {
    let mut works = Vec::new();
    for kind in kinds {
        match kind {
            Kind::Workflow => {
                let workflows =
                    list_all(&api::<MiningWorkflow>(client, scope), ListParams::default()).await?;
                works.extend(workflows.iter().map(WorkView::from));
            }
            Kind::ToolRun => {
                let runs = list_all(&api::<ToolRun>(client, scope), ListParams::default()).await?;
                works.extend(runs.iter().map(WorkView::from));
            }
        }
    }
    works.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| a.name.cmp(&b.name)));
    Ok(works)
}

/// One workflow or run, and its stored object (for `-o json|yaml`).
pub struct Found {
    pub view: WorkView,
    pub object: serde_json::Value,
}

/// The workflow or run `target` names: `mwf/NAME`, `toolrun/NAME`, or a
/// bare NAME when only one kind has it.
pub async fn find(client: &Client, namespace: &str, target: &str) -> Result<Found, CliError> {
    let (kinds, name) = crate::args::parse_target(target)?;
    let mut found = Vec::new();
    for kind in kinds {
        let object = match kind {
            Kind::Workflow => get::<MiningWorkflow>(client, namespace, name)
                .await?
                .map(|w| found_of(&w, WorkView::from(&w))),
            Kind::ToolRun => {
                get::<ToolRun>(client, namespace, name).await?.map(|r| found_of(&r, WorkView::from(&r)))
            }
        };
        found.extend(object);
    }
    match found.len() {
        0 => Err(CliError::NotFound { namespace: namespace.into(), name: name.into() }),
        1 => Ok(found.remove(0)),
        _ => Err(CliError::Ambiguous { name: name.into() }),
    }
}

fn found_of<K: serde::Serialize>(object: &K, view: WorkView) -> Found {
    Found { view, object: serde_json::to_value(object).unwrap_or_default() }
}

async fn get<K>(client: &Client, namespace: &str, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace).get_opt(name).await
}

/// Whether `job` is one the operator made for the work `found`: controlled
/// by it *and* named as the operator names its Jobs (a run's, once
/// recorded, with the uid in its status). Labels and ownerReferences
/// anyone in the namespace can write; a Job planted with both would
/// otherwise show (and its Pods' logs print) as the work's.
pub fn is_own_job(found: &Found, job: &Job) -> bool {
    let (name, uid) = (job.name_any(), job.metadata.uid.clone().unwrap_or_default());
    let work = &found.view;
    controlled_by(&job.metadata, &work.uid)
        && match work.kind {
            Kind::Workflow => mining_api::naming::is_workflow_job_name(&work.name, &work.uid, &name),
            Kind::ToolRun => serde_json::from_value::<ToolRun>(found.object.clone())
                .is_ok_and(|run| run.is_own_job(&name, &uid)),
        }
}

/// The Jobs the operator made for `found` and their Pods, oldest first: a
/// Pod only when one of those Jobs controls it *and* it runs exactly that
/// Job's template, as the operator checks before it reads one (anyone in
/// the namespace may plant a Pod naming the Job as its controller; its log
/// would otherwise print as the work's).
pub async fn jobs_and_pods(client: &Client, found: &Found) -> Result<(Vec<Job>, Vec<Pod>), CliError> {
    let work = &found.view;
    let namespace = Scope::Namespace(work.namespace.clone());
    let selector = ListParams::default().labels(work.kind.job_label());
    let mut jobs: Vec<Job> = list_all(&api::<Job>(client, &namespace), selector.clone())
        .await?
        .into_iter()
        .filter(|job| is_own_job(found, job))
        .collect();
    jobs.sort_by(|a, b| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp));
    let reads = work.kind.reads();
    let mut pods: Vec<Pod> = list_all(&api::<Pod>(client, &namespace), selector)
        .await?
        .into_iter()
        .filter(|pod| jobs.iter().any(|job| is_jobs_pod(pod, job, reads)))
        .collect();
    pods.sort_by(|a, b| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp));
    Ok((jobs, pods))
}

/// A Job as `show` lists it.
pub fn job_line(job: &Job) -> JobLine {
    let status = job.status.clone().unwrap_or_default();
    let condition =
        |type_: &str| status.conditions.iter().flatten().any(|c| c.type_ == type_ && c.status == "True");
    let state = if condition("Complete") {
        "Complete"
    } else if condition("Failed") {
        "Failed"
    } else if job.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
        "Suspended"
    } else {
        "Running"
    };
    JobLine {
        name: job.name_any(),
        state: state.into(),
        succeeded: status.succeeded.unwrap_or(0),
        completions: job.spec.as_ref().and_then(|s| s.completions).unwrap_or(1),
    }
}

/// A Pod as `show` lists it: why a container waits or ended, when it says.
pub fn pod_line(pod: &Pod) -> PodLine {
    let status = pod.status.clone().unwrap_or_default();
    let reason =
        status.container_statuses.iter().flatten().find_map(|c| {
            let state = c.state.as_ref()?;
            state.waiting.as_ref().and_then(|w| w.reason.clone()).or_else(|| {
                state.terminated.as_ref().and_then(|t| t.reason.clone()).filter(|r| r != "Completed")
            })
        });
    PodLine {
        name: pod.name_any(),
        phase: status.phase.unwrap_or_else(|| "Unknown".into()),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
        reason,
    }
}

/// Asks `work` to stop, as its caller's cancel does: `spec.cancel: true`.
pub async fn cancel(client: &Client, work: &WorkView) -> Result<(), CliError> {
    let patch = Patch::Merge(serde_json::json!({"spec": {"cancel": true}}));
    let params = PatchParams::default();
    match work.kind {
        Kind::Workflow => {
            Api::<MiningWorkflow>::namespaced(client.clone(), &work.namespace)
                .patch(&work.name, &params, &patch)
                .await?;
        }
        Kind::ToolRun => {
            Api::<ToolRun>::namespaced(client.clone(), &work.namespace)
                .patch(&work.name, &params, &patch)
                .await?;
        }
    }
    Ok(())
}

/// Longest a log is read back without `--tail`: a tool's whole log could be
/// gigabytes; the API server keeps what the kubelet keeps.
const DEFAULT_TAIL_LINES: i64 = 1000;

/// How often `logs -f` looks for the work's new Pods (a workflow's next
/// block, a run's next step or retry) and whether it ended.
const NEW_PODS_EVERY: Duration = Duration::from_secs(2);

/// Writes the logs of every container of the work's Pods, each line
/// prefixed with `[pod/container]`. With `follow`, streams them and each
/// Pod the work makes later, until the work has ended and its last Pod's
/// log is read (or the work is deleted); a container not started yet is
/// looked at again, not reported.
pub async fn logs(
    client: &Client,
    found: &Found,
    follow: bool,
    tail: Option<i64>,
    out: &mut (impl std::io::Write + Send),
) -> Result<(), CliError> {
    let (namespace, name, uid) =
        (found.view.namespace.clone(), found.view.name.clone(), found.view.uid.clone());
    let target = format!("{}/{name}", found.view.kind.short());
    let api = Api::<Pod>::namespaced(client.clone(), &namespace);
    let mut work = Some(Found { view: found.view.clone(), object: found.object.clone() });
    let mut streamed: HashSet<(String, String)> = HashSet::new();
    let mut merged = futures::stream::SelectAll::new();
    let mut next_look = tokio::time::Instant::now();
    loop {
        if tokio::time::Instant::now() >= next_look {
            let Some(current) = &work else { break };
            let (_, pods) = jobs_and_pods(client, current).await?;
            for pod in &pods {
                let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
                let containers = pod.spec.iter().flat_map(|s| s.containers.iter().map(|c| c.name.clone()));
                for container in containers.collect::<Vec<_>>() {
                    if streamed.contains(&(pod_uid.clone(), container.clone())) {
                        continue;
                    }
                    let prefix = format!("[{}/{}]", pod.name_any(), container);
                    let params = LogParams {
                        container: Some(container.clone()),
                        follow,
                        tail_lines: Some(tail.unwrap_or(DEFAULT_TAIL_LINES)),
                        ..LogParams::default()
                    };
                    match api.log_stream(&pod.name_any(), &params).await {
                        Ok(stream) => {
                            streamed.insert((pod_uid.clone(), container));
                            merged
                                .push(stream.lines().map_ok(move |line| format!("{prefix} {line}")).boxed());
                        }
                        // Still pulling its image: followed, it is tried again.
                        Err(_) if follow && !pod_ended(pod) => {}
                        Err(err) => {
                            streamed.insert((pod_uid.clone(), container));
                            writeln!(out, "{prefix} (no log: {})", crate::error::api_reason(&err))?;
                        }
                    }
                }
            }
            if !follow {
                break;
            }
            if current.view.finished && merged.is_empty() {
                return Ok(());
            }
            next_look = tokio::time::Instant::now() + NEW_PODS_EVERY;
            // Whether it ended, for the next look (deleted, or another of
            // its name: nothing more of it will come).
            work = match find(client, &namespace, &target).await {
                Ok(again) if again.view.uid == uid => Some(again),
                Ok(_) | Err(CliError::NotFound { .. }) => None,
                Err(err) => return Err(err),
            };
        }
        tokio::select! {
            line = merged.next(), if !merged.is_empty() => match line {
                Some(Ok(line)) => writeln!(out, "{}", crate::view::one_line(&line, 64 * 1024))?,
                Some(Err(err)) => writeln!(out, "(log stream ended: {err})")?,
                None => {}
            },
            _ = tokio::time::sleep_until(next_look), if follow => {}
        }
        if !follow && merged.is_empty() {
            break;
        }
    }
    // The streams already open are read to their end.
    while let Some(line) = merged.next().await {
        match line {
            Ok(line) => writeln!(out, "{}", crate::view::one_line(&line, 64 * 1024))?,
            Err(err) => writeln!(out, "(log stream ended: {err})")?,
        }
    }
    Ok(())
}

/// Whether every container of `pod` has ended (it will have no more log).
fn pod_ended(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(name: &str, uid: &str, owner_uid: &str) -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": uid, "ownerReferences": [{
                "apiVersion": "mining-operator.dev/v1alpha1", "kind": "X", "name": "x",
                "uid": owner_uid, "controller": true}]},
        }))
        .unwrap()
    }

    /// A namespace editor plants a Job with the work's label and a
    /// controller ownerReference naming its uid: before, `show` listed it
    /// and `logs` printed its Pods as the work's.
    #[test]
    fn a_planted_job_with_the_works_owner_reference_is_not_the_works() {
        const UID: &str = "3f2a8c1e-0b6d-4e8f-9a7c-5d1e2f3a4b5c";
        let workflow: MiningWorkflow = serde_json::from_value(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": "chain", "namespace": "ns", "uid": UID},
            "spec": {"difficulty": 8, "blocks": 3},
        }))
        .unwrap();
        let found = found_of(&workflow, WorkView::from(&workflow));
        let own = mining_api::naming::block_job_name("chain", UID, 2);
        assert!(is_own_job(&found, &job(&own, "j2", UID)));
        assert!(!is_own_job(&found, &job("chain-planted", "p", UID)), "right owner, a name it never gets");
        assert!(!is_own_job(&found, &job(&own, "j2", "another-uid")), "its name, another owner");

        let run: ToolRun = serde_json::from_value(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
            "metadata": {"name": "sum-1", "namespace": "ns", "uid": "run-uid"},
            "spec": {"tool": "sum", "arguments": "{}", "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}},
            "status": {"jobUid": "job-uid"},
        }))
        .unwrap();
        let found = found_of(&run, WorkView::from(&run));
        assert!(is_own_job(&found, &job("sum-1", "job-uid", "run-uid")));
        assert!(!is_own_job(&found, &job("sum-1-debug", "p", "run-uid")));
        assert!(!is_own_job(&found, &job("sum-1-s1", "p", "run-uid")), "a step it has not reached");
    }
}
