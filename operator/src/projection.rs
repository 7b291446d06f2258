//! What the operator's Job and Pod caches keep of each object (pure).
//!
//! The watches select by the `managed-by` label, which anyone who may create
//! a Job or Pod anywhere can put on one, up to the API server's 1.5 MiB. So
//! a cached object is a projection, bounded by a constant whatever was
//! written: the metadata our readers use (see [`mining_api::trim_for_cache`]),
//! the spec fields provenance compares (or none, when even those are
//! oversized: such an object is never taken for ours), and the status fields
//! a reconcile reads. An object whose controller is not of the kind that
//! makes ours (a MiningWorkflow for a Job, a Job for a Pod) is kept as a
//! stub: its name and owner, never its spec or status.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodSpec,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use mining_api::MiningWorkflow;

/// Largest spec (as JSON) a cached object keeps; a block Job's is ~2 KiB.
pub const MAX_CACHED_SPEC_BYTES: usize = 16 * 1024;
/// Longest message (a termination message, a condition's) kept; the
/// kubelet keeps at most 4 KiB of a termination message.
const MAX_MESSAGE_BYTES: usize = 4 * 1024;
/// The labels the Job controller puts on its Pods, which the Pod store is
/// searched by.
const JOB_POD_LABELS: [&str; 4] =
    ["job-name", "controller-uid", "batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid"];

/// The annotation the Job controller puts an Indexed Job's completion index in.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// Whether the controller reference of `meta` is of kind `K`.
fn controlled_by_kind<K: Resource<DynamicType = ()>>(meta: &ObjectMeta) -> bool {
    meta.owner_references.iter().flatten().any(|owner| {
        owner.controller == Some(true)
            && owner.api_version == K::api_version(&())
            && owner.kind == K::kind(&())
    })
}

fn fits<T: serde::Serialize>(value: &T) -> bool {
    serde_json::to_vec(value).is_ok_and(|json| json.len() <= MAX_CACHED_SPEC_BYTES)
}

fn clip(message: &mut Option<String>) {
    if let Some(text) = message.as_mut() {
        let clipped = mining_api::pow::clip(text, MAX_MESSAGE_BYTES).len();
        text.truncate(clipped);
    }
}

/// The Job as the Job cache keeps it.
pub fn project_job(job: &mut Job) {
    // A block's Pods are never compared on the template's own labels and annotations.
    project_job_of::<MiningWorkflow>(job, false);
}

/// A tool run's Job as the tool Job cache keeps it: whose it is, its uid,
/// its spec (its Pods are checked against the whole template) when it fits,
/// its conditions. A reconcile that finds no spec here (too large, or not
/// controlled by a run) reads the whole Job from the API server.
pub fn project_tool_job(job: &mut Job) {
    project_job_of::<mining_api::ToolRun>(job, true);
}

/// A Job controlled by work of kind `K`, bounded whatever anyone labels a
/// Job with: the spec only of one `K` controls and only when it fits.
fn project_job_of<K: kube::Resource<DynamicType = ()>>(job: &mut Job, template_metadata: bool) {
    mining_api::trim_for_cache(&mut job.metadata);
    if !controlled_by_kind::<K>(&job.metadata) {
        job.spec = None;
        job.status = None;
        return;
    }
    if let Some(spec) = job.spec.as_mut().filter(|_| !template_metadata) {
        spec.template.metadata = None;
    }
    if !job.spec.as_ref().is_some_and(fits) {
        job.spec = None;
    }
    if let Some(status) = job.status.as_mut() {
        status.uncounted_terminated_pods = None;
        for condition in status.conditions.iter_mut().flatten() {
            clip(&mut condition.message);
        }
    }
}

/// The Pod as the Pod cache keeps it.
pub fn project_pod(pod: &mut Pod) {
    // The completion index numbers a tool run's parts: a short number, or dropped.
    let index = pod.metadata.annotations.as_ref().and_then(|a| a.get(COMPLETION_INDEX)).cloned();
    mining_api::trim_for_cache_keeping(&mut pod.metadata, &JOB_POD_LABELS);
    if let Some(index) = index.filter(|index| index.len() <= 10) {
        pod.metadata.annotations.get_or_insert_default().insert(COMPLETION_INDEX.into(), index);
    }
    if !controlled_by_kind::<Job>(&pod.metadata) {
        pod.spec = None;
        pod.status = None;
        return;
    }
    pod.spec = pod.spec.take().map(compared_spec).filter(fits);
    pod.status = pod.status.take().map(read_status);
}

/// What provenance compares of a Pod spec
/// ([`mining_api::provenance::pod_mismatch`], for every kind).
fn compared_spec(spec: PodSpec) -> PodSpec {
    let compared_container = |c: Container| Container {
        name: c.name,
        image: c.image,
        command: c.command,
        args: c.args,
        env: c.env,
        env_from: c.env_from,
        volume_mounts: c.volume_mounts,
        working_dir: c.working_dir,
        termination_message_path: c.termination_message_path,
        termination_message_policy: c.termination_message_policy,
        security_context: c.security_context,
        ..Default::default()
    };
    PodSpec {
        containers: spec.containers.into_iter().map(compared_container).collect(),
        init_containers: spec.init_containers,
        ephemeral_containers: spec.ephemeral_containers,
        volumes: spec.volumes,
        service_account_name: spec.service_account_name,
        automount_service_account_token: spec.automount_service_account_token,
        host_network: spec.host_network,
        host_pid: spec.host_pid,
        host_ipc: spec.host_ipc,
        share_process_namespace: spec.share_process_namespace,
        security_context: spec.security_context,
        ..Default::default()
    }
}

/// What a reconcile reads of a Pod's status: its phase, when it started,
/// how each container ended, and why one cannot start (its waiting reason,
/// the scheduler's `PodScheduled=False`: see [`mining_api::pod_start`]).
fn read_status(status: PodStatus) -> PodStatus {
    let kept = |s: ContainerStatus| {
        let state = s.state.unwrap_or_default();
        let terminated = state.terminated.map(|t| {
            let mut message = t.message;
            clip(&mut message);
            ContainerStateTerminated {
                exit_code: t.exit_code,
                reason: t.reason,
                message,
                ..Default::default()
            }
        });
        let waiting = state.waiting.map(|mut w| {
            clip(&mut w.reason);
            clip(&mut w.message);
            w
        });
        let state = (terminated.is_some() || waiting.is_some()).then(|| ContainerState {
            terminated,
            waiting,
            ..Default::default()
        });
        ContainerStatus { name: s.name, state, ..Default::default() }
    };
    let unscheduled =
        status.conditions.into_iter().flatten().filter(|c| c.type_ == "PodScheduled" && c.status == "False");
    let conditions: Vec<PodCondition> = unscheduled
        .take(1)
        .map(|mut c| {
            clip(&mut c.message);
            clip(&mut c.reason);
            PodCondition {
                type_: c.type_,
                status: c.status,
                reason: c.reason,
                message: c.message,
                ..Default::default()
            }
        })
        .collect();
    PodStatus {
        phase: status.phase,
        start_time: status.start_time,
        container_statuses: status.container_statuses.map(|all| all.into_iter().map(kept).collect()),
        init_container_statuses: status
            .init_container_statuses
            .map(|all| all.into_iter().map(kept).collect()),
        conditions: (!conditions.is_empty()).then_some(conditions),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::EnvVar;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;
    use crate::mining::provenance::job_mismatch;
    use crate::testing::built_block_job;

    /// The check a block's reader makes, on what the caches keep.
    fn pod_mismatch(pod: &Pod, job: &Job) -> Option<String> {
        mining_api::provenance::pod_mismatch(pod, job, <MiningWorkflow as mining_api::Work>::READS)
    }

    fn built() -> Job {
        let mut job = built_block_job();
        job.metadata.uid = Some("job-uid".into());
        job
    }

    fn owner<K: Resource<DynamicType = ()>>(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: K::api_version(&()).into(),
            kind: K::kind(&()).into(),
            name: "owner".into(),
            uid: uid.into(),
            controller: Some(true),
            ..Default::default()
        }
    }

    /// A Pod as the Job controller and the kubelet leave it.
    fn pod_of(job: &Job) -> Pod {
        let mut pod = Pod {
            spec: job.spec.clone().unwrap().template.spec,
            status: Some(PodStatus {
                phase: Some("Succeeded".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "miner".into(),
                    image: "miner:1".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 0,
                            message: Some("{\"nonce\":1}".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.metadata.owner_references = Some(vec![owner::<Job>("job-uid")]);
        pod.metadata.labels = Some([("job-name".to_string(), "w-b1".to_string())].into());
        pod
    }

    fn padded_env() -> Vec<EnvVar> {
        vec![EnvVar { name: "PAD".into(), value: Some("x".repeat(700 * 1024)), ..Default::default() }]
    }

    fn json_len<T: serde::Serialize>(value: &T) -> usize {
        serde_json::to_vec(value).unwrap().len()
    }

    #[test]
    fn the_operators_own_job_and_pod_are_still_theirs_after_projection() {
        let mut job = built();
        project_job(&mut job);
        assert_eq!(job_mismatch(&job, &built()), None);
        let mut pod = pod_of(&built());
        project_pod(&mut pod);
        assert_eq!(pod_mismatch(&pod, &built()), None);
        assert_eq!(pod.metadata.labels.unwrap().get("job-name").map(String::as_str), Some("w-b1"));
        let status = pod.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        let terminated = status.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
        assert_eq!(terminated.message.as_deref(), Some("{\"nonce\":1}"));
    }

    #[test]
    fn a_pod_keeps_its_completion_index_and_start_but_no_long_index() {
        let started = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::testing::at(5));
        let mut pod = pod_of(&built());
        pod.status.as_mut().unwrap().start_time = Some(started.clone());
        pod.metadata.annotations = Some([(COMPLETION_INDEX.to_string(), "3".to_string())].into());
        let mut long = pod.clone();
        project_pod(&mut pod);
        assert_eq!(pod.metadata.annotations.unwrap()[COMPLETION_INDEX], "3", "a part's number");
        assert_eq!(pod.status.unwrap().start_time, Some(started), "which running Pod is newest");
        long.metadata.annotations = Some([(COMPLETION_INDEX.to_string(), "9".repeat(64))].into());
        project_pod(&mut long);
        assert!(long.metadata.annotations.is_none_or(|a| !a.contains_key(COMPLETION_INDEX)));
    }

    #[test]
    fn a_planted_pod_is_a_stub_of_constant_size_whatever_it_carries() {
        let mut planted = pod_of(&built());
        planted.metadata.owner_references = None;
        planted.spec.as_mut().unwrap().containers[0].env = Some(padded_env());
        planted.metadata.annotations = Some([("x".to_string(), "y".repeat(200 * 1024))].into());
        assert!(json_len(&planted) > 700 * 1024);
        project_pod(&mut planted);
        assert!(json_len(&planted) < 1024, "{} bytes kept", json_len(&planted));
        assert!(planted.spec.is_none() && planted.status.is_none());
    }

    #[test]
    fn an_oversized_pod_or_job_of_the_right_kind_keeps_no_spec_and_is_never_ours() {
        let mut pod = pod_of(&built());
        pod.spec.as_mut().unwrap().containers[0].env = Some(padded_env());
        project_pod(&mut pod);
        assert!(json_len(&pod) < 8 * 1024, "{} bytes kept", json_len(&pod));
        assert!(pod_mismatch(&pod, &built()).is_some());
        let mut job = built();
        job.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].env = Some(padded_env());
        project_job(&mut job);
        assert!(json_len(&job) < 8 * 1024, "{} bytes kept", json_len(&job));
        assert!(job_mismatch(&job, &built()).is_some());
    }

    #[test]
    fn a_job_no_workflow_controls_is_a_stub() {
        let mut job = built();
        job.metadata.owner_references = Some(vec![owner::<Job>("someone")]);
        project_job(&mut job);
        assert!(job.spec.is_none() && job.status.is_none());
    }

    #[test]
    fn long_messages_are_clipped() {
        let mut pod = pod_of(&built());
        let statuses = pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap();
        statuses[0].state.as_mut().unwrap().terminated.as_mut().unwrap().message = Some("é".repeat(10_000));
        project_pod(&mut pod);
        let status = pod.status.unwrap().container_statuses.unwrap();
        let message = status[0].state.clone().unwrap().terminated.unwrap().message.unwrap();
        assert!(message.len() <= MAX_MESSAGE_BYTES);
    }
}
