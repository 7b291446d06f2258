//! The apply and status steps of a reconcile: the few writes a plan asks
//! for (create or adopt a Job, delete one, write the status), in the one
//! order that keeps every guarantee ([`run`]), and the Events that describe
//! them. Each is one API call; deciding is `plan`'s job.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use mining_api::{MiningWorkflow, MiningWorkflowStatus};
use serde_json::json;
use std::time::Instant;
use tracing::{info, warn};

use crate::job::{MANAGER, MinerSettings, build_block_job, build_range_job};
use crate::memory::{ExpectedJob, Memory, Reservation};
use crate::naming::workflow_label;
use crate::plan::{Action, Plan, PlannedEvent, status_rejected};
use crate::provenance::job_mismatch;
use crate::{Error, Result};
use mining_api::provenance::controlled_by;

/// The workflow a plan is applied to, and what applying it needs.
pub struct Target<'a> {
    pub client: &'a Client,
    /// `reportingInstance` of the Events.
    pub instance: &'a str,
    pub memory: &'a Memory,
    pub settings: &'a MinerSettings<'a>,
    /// As planned on (the freshest status this operator knows).
    pub workflow: &'a MiningWorkflow,
    pub name: &'a str,
    pub namespace: &'a str,
}

/// What applying a plan came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Every action taken and the status written (or unchanged).
    Done,
    /// Someone wrote since the plan's status was read: plan again.
    Replan,
    /// Retention is over: the workflow was deleted.
    WorkflowDeleted,
    /// The API server refused the planned status; the workflow failed with `StatusRejected`.
    StatusRejected,
}

/// Applies `plan`: deletions first (a status saying Cancelled must not stand
/// while its Jobs still run), then the status, then creations (a block is
/// recorded before the next block's Job builds on it), then the Events.
/// `admission` is released once the status is written.
pub async fn run(target: &Target<'_>, plan: &Plan, admission: Option<Reservation<'_>>) -> Result<Applied> {
    let name = target.name;
    let jobs: Api<Job> = Api::namespaced(target.client.clone(), target.namespace);
    for action in &plan.actions {
        match action {
            Action::DeleteJob { name: job } => delete_job(&jobs, name, job).await?,
            Action::DeleteWorkflow => {
                let api: Api<MiningWorkflow> = Api::namespaced(target.client.clone(), target.namespace);
                match api.delete(name, &DeleteParams::background()).await {
                    Ok(_) => info!(workflow = %name, "retention over; deleted workflow"),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(source) => return Err(Error::DeleteWorkflow { workflow: name.to_string(), source }),
                }
                return Ok(Applied::WorkflowDeleted);
            }
            Action::CreateJob { .. } | Action::CreateRangeJob { .. } | Action::CleanUpJob { .. } => {}
        }
    }
    let mut events = plan.events.clone();
    if target.workflow.status.as_ref() != Some(&plan.status) {
        match record_status(target, &plan.status).await {
            Ok(true) => info!(
                workflow = %name,
                namespace = %target.namespace,
                phase = %plan.status.phase.unwrap_or_default(),
                progress = plan.status.progress.as_deref().unwrap_or(""),
                "status updated"
            ),
            Ok(false) => return Ok(Applied::Replan),
            Err(kube::Error::Api(s)) if s.code == 422 => {
                let fallback = status_rejected(target.workflow, &s.message, Timestamp::now());
                warn!(workflow = %name, error = %s.message, "status refused by the API server; failing the workflow");
                let written = record_status(target, &fallback)
                    .await
                    .map_err(|source| Error::WriteStatus { workflow: name.to_string(), source })?;
                if !written {
                    return Ok(Applied::Replan);
                }
                let note = fallback.message.clone().unwrap_or_default();
                events.push(PlannedEvent {
                    warning: true,
                    reason: mining_api::reasons::STATUS_REJECTED,
                    note,
                });
                publish_events(target.client, target.instance, target.workflow, name, events);
                return Ok(Applied::StatusRejected);
            }
            Err(source) => return Err(Error::WriteStatus { workflow: name.to_string(), source }),
        }
    }
    drop(admission);
    for action in &plan.actions {
        let workflow = target.workflow;
        let (job, block, range) = match action {
            Action::CreateJob { block, prev, difficulty } => {
                (build_block_job(workflow, *block, prev, *difficulty, target.settings), *block, None)
            }
            Action::CreateRangeJob { block, prev, difficulty, start, count } => {
                let range = (*start, *count);
                let job = build_range_job(workflow, *block, prev, *difficulty, range, target.settings);
                (job, *block, Some(range))
            }
            Action::CleanUpJob { name: job } => {
                delete_job(&jobs, name, job).await?;
                continue;
            }
            Action::DeleteJob { .. } | Action::DeleteWorkflow => continue,
        };
        let job = create_or_adopt_job(workflow, &jobs, job, block).await?;
        let workflow_uid = workflow.metadata.uid.clone().unwrap_or_default();
        target.memory.expect_job(job, ExpectedJob { workflow_uid, block, range, created: Instant::now() });
    }
    publish_events(target.client, target.instance, target.workflow, name, events);
    Ok(Applied::Done)
}

/// Writes `status` on the version the target was read at and remembers it;
/// `false` when someone wrote since (409): the memory of this workflow is
/// dropped so the next plan starts from the cache.
pub async fn record_status(target: &Target<'_>, status: &MiningWorkflowStatus) -> kube::Result<bool> {
    let api: Api<MiningWorkflow> = Api::namespaced(target.client.clone(), target.namespace);
    let version = target.workflow.metadata.resource_version.as_deref();
    match write_status(&api, target.name, status, version).await {
        Ok(version) => {
            target.memory.remember(target.workflow, status, version);
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // A user's spec change, or a newer leader.
            info!(workflow = %target.name, "workflow changed since it was read; planning again");
            target.memory.forget(target.workflow);
            Ok(false)
        }
        Err(err) => Err(err),
    }
}

pub async fn delete_job(api: &Api<Job>, workflow: &str, job: &str) -> Result<()> {
    match api.delete(job, &DeleteParams::background()).await {
        Ok(_) => {
            info!(workflow = %workflow, job = %job, "deleted Job");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::DeleteJob { name: job.to_string(), source }),
    }
}

/// Server-side applies `status` to work of any kind under this operator's
/// field manager, only if the object is still at `resource_version` (409
/// otherwise: a user's change, or a newer leader's write, is never
/// overwritten by a plan made before it); returns the version it produced.
pub async fn write_status<K: mining_api::Work>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
    resource_version: Option<&str>,
) -> kube::Result<Option<String>> {
    let mut body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(version) = resource_version {
        body["metadata"] = json!({ "resourceVersion": version });
    }
    let written = api.patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(body)).await?;
    Ok(written.meta().resource_version.clone())
}

/// Events about work of any kind go out off the reconcile's path: they
/// describe what was done, and waiting for them would delay its next step.
///
/// Written directly rather than through kube's `Recorder`, which merges
/// Events by reason into one series (keeping only the first note, so
/// "BlockMined (x6)" told of block 1 only) and names them after the whole
/// workflow name (too long past ~236 characters, so those got no Events).
pub fn publish_events<K: Resource<DynamicType = ()>>(
    client: &Client,
    instance: &str,
    regarding: &K,
    name: &str,
    events: Vec<PlannedEvent>,
) {
    if events.is_empty() {
        return;
    }
    let api: Api<EventV1> =
        Api::namespaced(client.clone(), regarding.meta().namespace.as_deref().unwrap_or_default());
    let reference = regarding.object_ref(&());
    let name = name.to_string();
    let instance = instance.to_string();
    tokio::spawn(async move {
        for (sequence, event) in events.into_iter().enumerate() {
            let body = build_event(&reference, &instance, event, Timestamp::now(), sequence);
            if let Err(err) = api.create(&PostParams::default(), &body).await {
                warn!(name = %name, error = %err, "could not record an Event");
            }
        }
    });
}

/// One events.k8s.io Event about `regarding`, named to fit any workflow name.
pub fn build_event(
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
    instance: &str,
    event: PlannedEvent,
    now: Timestamp,
    sequence: usize,
) -> EventV1 {
    let stem = workflow_label(regarding.name.as_deref().unwrap_or("workflow"));
    EventV1 {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{stem}.{:x}{sequence:02x}", now.as_nanosecond())),
            namespace: regarding.namespace.clone(),
            ..Default::default()
        },
        action: Some("Reconcile".into()),
        reason: Some(event.reason.into()),
        note: Some(event.note),
        type_: Some(if event.warning { "Warning" } else { "Normal" }.into()),
        event_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now)),
        regarding: Some(regarding.clone()),
        reporting_controller: Some(MANAGER.into()),
        reporting_instance: Some(instance.to_string()),
        ..Default::default()
    }
}

/// Creates the block's Job; when one of that name exists and this workflow
/// controls it and it is exactly the Job built here (a restart after
/// create, before status), it is adopted.
pub async fn create_or_adopt_job(
    workflow: &MiningWorkflow,
    api: &Api<Job>,
    job: Job,
    block: u32,
) -> Result<String> {
    let name = job.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams { field_manager: Some(MANAGER.into()), ..Default::default() }, &job).await {
        Ok(_) => {
            info!(workflow = %workflow.name_any(), block, job = %name, "created Job");
            Ok(name)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing =
                api.get(&name).await.map_err(|source| Error::CreateJob { name: name.clone(), source })?;
            let uid = workflow.metadata.uid.as_deref().unwrap_or_default();
            // Adopted only when this workflow controls it and it runs exactly
            // what this operator builds: never a look-alike someone planted.
            let why = if controlled_by(&existing.metadata, uid) {
                job_mismatch(&existing, &job)
            } else {
                Some("this workflow does not control it".into())
            };
            match why {
                None => {
                    info!(workflow = %workflow.name_any(), block, job = %name, "adopted existing Job");
                    Ok(name)
                }
                Some(why) => Err(Error::ForeignJob { name, why }),
            }
        }
        Err(source) => Err(Error::CreateJob { name, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_named_within_limits_whatever_the_workflow_name() {
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            name: Some("w".repeat(253)),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        let planned = PlannedEvent { warning: true, reason: "BlockMined", note: "block 2/3".into() };
        let event =
            build_event(&regarding, "operator-0", planned, Timestamp::from_second(1_800_000_000).unwrap(), 1);
        let name = event.metadata.name.unwrap();
        assert!(name.len() <= 253 && name.starts_with("www"), "{name}");
        assert_eq!(event.regarding.unwrap().name, regarding.name);
        assert_eq!((event.type_.as_deref(), event.note.as_deref()), (Some("Warning"), Some("block 2/3")));
    }
}
