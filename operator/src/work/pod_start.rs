//! "This Job's Pods cannot start, and why": one observation for every kind
//! of work (the decision on it is [`mining_api::pod_start::verdict`]).
//!
//! Two sources, each first-hand:
//! - the Job's own Pods (those [`mining_api::provenance`] says it made),
//!   as the scheduler and the node report them: waiting reasons and
//!   `PodScheduled=False`. Whoever may write `pods/status` stands with the
//!   node (they could write any result a Pod reports); a Pod someone else
//!   planted under the Job is not its own and is never read.
//! - a Job that has made no Pod a few seconds after it was created: the
//!   operator asks the API server itself, with a dry-run create of the
//!   Pod the Job controller would make, whether it admits it. The Job
//!   controller's `FailedCreate` Events say the same, but Events are
//!   anyone's to write who may create one in the namespace: a forged one
//!   could fail other callers' work. The dry-run's answer is the API
//!   server's own (Pod Security, webhooks, quotas, LimitRanges).

use std::time::Duration;

use futures::Stream;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt as _};
use mining_api::pod_start::{self, Blocked, NO_POD_GRACE};
use tokio::sync::broadcast;
use tracing::{debug, warn};

/// Jobs whose Pods the Pod watch saw unable to start, for every kind's
/// controller to wake the Job's owner: the node's report changes nothing a
/// kind watches (its Job stays as it was).
pub type BlockedJobs = broadcast::Sender<ObjectRef<Job>>;

/// How many sightings a slow controller may fall behind on (it then only
/// misses wakes: its timers still look again).
pub const BLOCKED_JOBS_BACKLOG: usize = 1024;

/// The Job whose Pod `pod` is, when its status says it cannot start. A
/// Pod's labels and owner are anyone's to write: this only wakes the
/// Job's owner, whose reconcile reads only the Job's own Pods.
pub fn blocked_job(pod: &Pod) -> Option<ObjectRef<Job>> {
    pod_start::of_pod(pod)?;
    let owner = pod.owner_references().iter().find(|o| o.controller == Some(true) && o.kind == "Job")?;
    Some(ObjectRef::new(&owner.name).within(&pod.namespace()?))
}

/// The owners of kind `K` of the Jobs `blocked` names, as `jobs` (the
/// kind's Job store) holds them: a stream to reconcile on.
pub fn owners_of_blocked<K>(
    blocked: &BlockedJobs,
    jobs: Store<Job>,
) -> impl Stream<Item = ObjectRef<K>> + use<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    futures::stream::unfold((blocked.subscribe(), jobs), |(mut seen, jobs)| async move {
        loop {
            match seen.recv().await {
                Ok(job) => {
                    let Some(stored) = jobs.get(&job) else { continue };
                    let owner = stored.owner_references().iter().find(|o| {
                        o.controller == Some(true)
                            && o.kind == K::kind(&())
                            && o.api_version == K::api_version(&())
                    });
                    if let (Some(owner), Some(namespace)) = (owner, stored.namespace()) {
                        let owner = ObjectRef::new(&owner.name).within(&namespace);
                        return Some((owner, (seen, jobs)));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// How often a Job that made no Pod, though admission takes it, is asked again.
const ADMITTED_RECHECK: Duration = Duration::from_secs(30);

/// What the observation found, and when to look again without a change
/// to wake the work (a Job that made no Pod yet changes nothing watched).
#[derive(Debug, Default, PartialEq)]
pub struct Starting {
    pub blocked: Option<Blocked>,
    pub look_again: Option<Duration>,
}

/// Whether a Job still has Pods to start: not finished, suspended or being deleted.
fn starting(job: &Job) -> bool {
    let status = job.status.clone().unwrap_or_default();
    let ended = status
        .conditions
        .iter()
        .flatten()
        .any(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True");
    let suspended = job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false);
    !ended && !suspended && job.metadata.deletion_timestamp.is_none()
}

/// Why the Pods of `job` cannot start, from `own` (the Pods it made, as
/// the caller knows them) and, when it made none for [`NO_POD_GRACE`],
/// the API server's answer to a dry-run of its Pod. `template` is the Job
/// whose Pod template the dry-run submits (the operator's own build of it
/// where the cache keeps no template metadata).
pub async fn observe(client: &Client, job: &Job, template: &Job, own: &[&Pod], now: Timestamp) -> Starting {
    if !starting(job) {
        return Starting::default();
    }
    let unfinished: Vec<&Pod> = own
        .iter()
        .copied()
        .filter(|p| {
            !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
        })
        .collect();
    if !unfinished.is_empty() {
        let readings: Vec<Blocked> = unfinished.iter().filter_map(|pod| pod_start::of_pod(pod)).collect();
        // A Job with a Pod the scheduler placed runs: its others waiting for
        // room is its own parallelism, not work that waits for a node
        // (`Cause::NoCapacity` means none of its Pods runs).
        let placed = readings.len() < unfinished.len();
        let readings = readings.into_iter().filter(|b| !(placed && b.cause == pod_start::Cause::NoCapacity));
        let blocked = pod_start::first(readings);
        // A Pod that waits is looked at again, so the message follows the node's.
        let look_again = blocked.as_ref().map(|_| pod_start::WAITING_RECHECK);
        return Starting { blocked, look_again };
    }
    // Pods the Job counts that the caller does not see yet: nothing to ask.
    if job.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0 {
        return Starting::default();
    }
    let created = job.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    let age = now.duration_since(created);
    let grace = k8s_openapi::jiff::SignedDuration::try_from(NO_POD_GRACE).unwrap_or_default();
    if age < grace {
        // A creation time ahead of this clock waits the grace, no longer.
        let left = (grace - age).unsigned_abs().min(NO_POD_GRACE);
        return Starting { blocked: None, look_again: Some(left.max(Duration::from_millis(200))) };
    }
    let blocked = dry_run(client, job, template, created).await;
    // Admitted: the Job controller is only slow (its Pod's creation wakes
    // the work), or it backs off from a refusal that has cleared; look
    // again now and then, not every few seconds.
    let look_again = if blocked.is_some() { pod_start::WAITING_RECHECK } else { ADMITTED_RECHECK };
    Starting { blocked, look_again: Some(look_again) }
}

/// The API server's answer to the Pod the Job controller would create for
/// `job` (from `template`'s Pod template), not stored (`dryRun=All`).
async fn dry_run(client: &Client, job: &Job, template: &Job, since: Timestamp) -> Option<Blocked> {
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let pod = pod_of(job, template)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let params = PostParams { dry_run: true, field_manager: Some(crate::work::MANAGER.into()) };
    match pods.create(&params, &pod).await {
        Ok(_) => None,
        Err(kube::Error::Api(refusal)) if matches!(refusal.code, 400 | 403 | 422) => {
            let blocked = pod_start::of_refusal(&refusal.message, since);
            if blocked.is_none() {
                warn!(job = %name, %namespace, message = %refusal.message,
                    "cannot ask whether the Job's Pod is admitted: the operator may not create Pods (dry-run) here");
            }
            blocked
        }
        Err(err) => {
            debug!(job = %name, %namespace, error = %err, "asking whether the Job's Pod is admitted");
            None
        }
    }
}

/// The Pod the Job controller makes of `job`: its template, the Job's
/// labels on it, controlled by the Job.
fn pod_of(job: &Job, template: &Job) -> Option<Pod> {
    let spec = template.spec.as_ref()?;
    let name = job.name_any();
    let uid = job.uid()?;
    let mut metadata = spec.template.metadata.clone().unwrap_or_default();
    let labels = metadata.labels.get_or_insert_default();
    labels.insert("job-name".into(), name.clone());
    labels.insert("controller-uid".into(), uid.clone());
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: job.namespace(),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name,
                uid,
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..metadata
        },
        spec: spec.template.spec.clone(),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(status: serde_json::Value) -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "n", "uid": "u", "creationTimestamp": "2023-11-14T22:13:20Z"},
            "spec": {"template": {"metadata": {"labels": {"team": "a"}},
                                   "spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_dry_run_pod_is_what_the_job_controller_makes() {
        let job = job(json!({}));
        let pod = pod_of(&job, &job).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("j-"));
        let labels = pod.metadata.labels.unwrap();
        assert_eq!((labels["team"].as_str(), labels["job-name"].as_str()), ("a", "j"));
        assert_eq!(labels["controller-uid"], "u");
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("Job", "u", Some(true)));
        assert_eq!(pod.spec.unwrap().containers[0].image.as_deref(), Some("i"));
    }

    #[test]
    fn only_a_job_with_pods_to_start_is_observed() {
        assert!(starting(&job(json!({}))));
        assert!(!starting(&job(json!({"conditions": [{"type": "Complete", "status": "True"}]}))));
        assert!(!starting(&job(json!({"conditions": [{"type": "Failed", "status": "True"}]}))));
        let mut suspended = job(json!({}));
        suspended.spec.as_mut().unwrap().suspend = Some(true);
        assert!(!starting(&suspended), "a queue controller's suspended Job waits for it, not for a node");
    }
}
