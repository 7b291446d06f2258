//! The run's own Pods: from the operator's Pod watch when it can say, else
//! read a page at a time; only those its Job made from its template,
//! projected to what a plan needs (outcomes, the newest running one for the
//! status line).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::reflector::Store;
use mining_api::{ToolRun, Work as _};

use super::plan::{self, PodOutcome};
use crate::Result;

pub(super) use crate::projection::COMPLETION_INDEX;
#[cfg(test)]
pub(super) use crate::work::pods::POD_PAGE_SIZE;

/// What the run's own Pods ended with, and the newest running one (its
/// name and first container's) for the status line.
pub(super) type OwnPods = (Vec<PodOutcome>, Option<(String, String)>);

/// What the run's own Pods say, as [`own_pods`], from the Pod watch (which
/// holds every Pod with our label, projected); `None` when the watch cannot
/// say: before its first list, when one of the Job's Pods is held without
/// the spec provenance needs (too large to keep), or when the Job is done
/// and the watch does not show what it finished with yet (a result or a
/// failure is read from the API server then, never from a lagging copy).
pub(super) fn cached_own_pods(store: &Store<Pod>, job: &Job, finished: Option<Finished>) -> Option<OwnPods> {
    futures::FutureExt::now_or_never(store.wait_until_ready())?.ok()?;
    // A Job's Pods carry its name (each step of a run has a Job of its own).
    let job_uid = job.metadata.uid.as_deref().unwrap_or_default();
    let of_job = crate::work::pods::cached_named(store, job);
    // A Pod the Job controls that the projection cannot show as made from
    // the template (too large to keep, or a field the projection lacks) is
    // judged on the API server's copy instead.
    let (own, unsure): (Vec<&Pod>, Vec<&Pod>) = of_job
        .iter()
        .map(AsRef::as_ref)
        .filter(|pod| mining_api::provenance::controlled_by(&pod.metadata, job_uid))
        .partition(|pod| made_by(pod, job));
    if !unsure.is_empty() {
        return None;
    }
    let tool = tool_container(job)?;
    let outcomes = number_without_indexes(outcomes_of(&own, &tool));
    match finished {
        Some(Finished::Complete { parts }) => {
            let succeeded = outcomes.iter().filter(|o| o.succeeded).count();
            (succeeded >= usize::try_from(parts).unwrap_or(0)).then_some(())?;
        }
        Some(Finished::Failed) => return None,
        None => {}
    }
    let running = newest_running(own.iter().copied()).map(|(_, pod)| (pod, tool));
    Some((outcomes, running))
}

/// How a run's Job finished, for what its Pods must show before the watch's
/// copy of them is taken.
#[derive(Clone, Copy, Debug)]
pub(super) enum Finished {
    /// Every part succeeded: that many succeeded Pods of its own.
    Complete { parts: i32 },
    /// Failed: read from the API server (which Pod failed how).
    Failed,
}

/// The container whose termination message is a part's result and whose
/// log carries its status lines: the first of the Job's template (the
/// tool author's), wherever admission put others in the Pod.
pub(super) fn tool_container(job: &Job) -> Option<String> {
    job.spec.as_ref()?.template.spec.as_ref()?.containers.first().map(|c| c.name.clone())
}

/// The newest running Pod of `own`: when it started, and its name.
fn newest_running<'a>(own: impl Iterator<Item = &'a Pod>) -> Option<(Option<Timestamp>, String)> {
    let mut running: Option<(Option<Timestamp>, String)> = None;
    for pod in own.filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")) {
        let started = pod.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0);
        if running.as_ref().is_none_or(|(at, _)| started > *at) {
            running = Some((started, pod.name_any()));
        }
    }
    running
}

/// What the Pods the run's Job made ended with, and the newest running
/// one (with its first container) for the status line. Read page by page,
/// each projected before the next: Pods are what anyone can create.
pub(super) async fn own_pods(pods: &Api<Pod>, job: &Job) -> Result<OwnPods> {
    let tool = tool_container(job).unwrap_or_default();
    let mut own_outcomes = Vec::new();
    let mut running: Option<(Option<Timestamp>, String)> = None;
    crate::work::pods::each_own_page(pods, job, ToolRun::READS, |own| {
        own_outcomes.extend(outcomes_of(&own, &tool));
        if let Some(newest) = newest_running(own.iter().copied())
            && running.as_ref().is_none_or(|(at, _)| newest.0 > *at)
        {
            running = Some(newest);
        }
    })
    .await?;
    Ok((number_without_indexes(own_outcomes), running.map(|(_, pod)| (pod, tool))))
}

/// The latest status line of the run's running Pod `pod`, from the tail of
/// its first container's log; a failure to read is no reason to fail
/// anything, so it is only logged.
pub(super) async fn latest_progress(pods: &Api<Pod>, pod: &str, container: String) -> Option<String> {
    let params = kube::api::LogParams {
        container: Some(container),
        tail_lines: Some(plan::PROGRESS_TAIL_LINES),
        limit_bytes: Some(plan::PROGRESS_TAIL_BYTES),
        ..Default::default()
    };
    match pods.logs(pod, &params).await {
        Ok(log) => plan::progress_line(&log),
        Err(err) => {
            tracing::debug!(pod = %pod, error = %err, "reading a tool run's status line");
            None
        }
    }
}

/// Whether `pod` is one the Job controller made from `job`'s template: it
/// names the Job as its controller and runs exactly what the template runs.
pub(super) fn made_by(pod: &Pod, job: &Job) -> bool {
    crate::work::pods::made_by(pod, job, ToolRun::READS)
}

/// What each Pod controlled by the Job `job_uid` ended with. A Pod another
/// party made with the same labels is not among them: results come only
/// from the run's own Job. Without completion indexes (API servers before
/// Indexed Jobs) succeeded Pods are numbered in the order they finished.
pub(super) fn outcomes_of(own: &[&Pod], tool: &str) -> Vec<PodOutcome> {
    own.iter()
        .filter_map(|pod| {
            let phase = pod.status.as_ref()?.phase.as_deref()?;
            let first = tool;
            let terminated = pod
                .status
                .as_ref()?
                .container_statuses
                .iter()
                .flatten()
                .find(|status| status.name == first)
                .and_then(|status| status.state.as_ref()?.terminated.clone());
            let index = pod.annotations().get(COMPLETION_INDEX).and_then(|i| i.parse().ok());
            Some(PodOutcome {
                index: index.unwrap_or(-1),
                succeeded: phase == "Succeeded",
                exit_code: terminated.as_ref().map(|t| t.exit_code),
                message: terminated.as_ref().and_then(|t| t.message.clone()).unwrap_or_default(),
                finished_at: terminated.and_then(|t| t.finished_at).map(|t| t.0),
            })
        })
        .collect()
}

/// Numbers succeeded Pods in the order they finished when none carries a
/// completion index (API servers before Indexed Jobs).
pub(super) fn number_without_indexes(mut outcomes: Vec<PodOutcome>) -> Vec<PodOutcome> {
    if outcomes.iter().all(|o| o.index < 0) {
        let mut succeeded: Vec<&mut PodOutcome> = outcomes.iter_mut().filter(|o| o.succeeded).collect();
        succeeded.sort_by_key(|o| o.finished_at);
        for (index, outcome) in succeeded.into_iter().enumerate() {
            outcome.index = index as i32;
        }
    }
    outcomes
}
