//! Whether a Job or Pod is one this operator's own Job made (pure).
//!
//! Anyone who may create Jobs or Pods in a namespace can copy a block Job's
//! labels, and even an ownerReference (uids are readable). What they cannot
//! do is make the copy run anything but the operator's miner: so a Job is
//! ours only when its Pod template runs exactly what `job.rs` builds, and a
//! Pod's result is read only when the Job controls it and it runs exactly
//! its Job's template. A copy that passes both checks computes the honest
//! answer, which the operator verifies anyway.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Whether `meta` names `uid` as its controller.
pub fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    !uid.is_empty()
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

/// How a stored Job differs from the one the operator builds for its block
/// (`None`: it is the operator's).
pub fn job_mismatch(job: &Job, built: &Job) -> Option<String> {
    let (Some(stored), Some(expected)) = (template_spec(job), template_spec(built)) else {
        return Some("it has no Pod template".into());
    };
    pod_spec_mismatch(stored, expected)
}

/// How a Pod differs from what its Job's template runs (`None`: it runs the template).
pub fn pod_mismatch(pod: &Pod, job: &Job) -> Option<String> {
    match (pod.spec.as_ref(), template_spec(job)) {
        (Some(pod_spec), Some(template)) => pod_spec_mismatch(pod_spec, template),
        _ => Some("it has no spec".into()),
    }
}

fn template_spec(job: &Job) -> Option<&PodSpec> {
    job.spec.as_ref()?.template.spec.as_ref()
}

/// The first difference that could change what a Pod prints, between a Pod
/// spec as stored (with the API server's defaults) and the one expected.
/// Fields the API server defaults are compared only where the expected spec
/// sets them.
pub fn pod_spec_mismatch(stored: &PodSpec, expected: &PodSpec) -> Option<String> {
    if stored.containers.len() != expected.containers.len() {
        return Some(format!(
            "it runs {} containers, not {}",
            stored.containers.len(),
            expected.containers.len()
        ));
    }
    if !stored.init_containers.as_ref().is_none_or(Vec::is_empty) {
        return Some("it has init containers".into());
    }
    if !stored.ephemeral_containers.as_ref().is_none_or(Vec::is_empty) {
        return Some("it has ephemeral containers".into());
    }
    if stored.volumes.as_ref().is_some_and(|v| !v.is_empty()) && stored.volumes != expected.volumes {
        return Some("it mounts volumes".into());
    }
    let expected_account = expected.service_account_name.as_deref().unwrap_or("default");
    if stored.service_account_name.as_deref().unwrap_or("default") != expected_account {
        return Some(format!("it runs as ServiceAccount {:?}", stored.service_account_name));
    }
    if stored.automount_service_account_token != expected.automount_service_account_token {
        return Some("its ServiceAccount token mount differs".into());
    }
    if [stored.host_network, stored.host_pid, stored.host_ipc].contains(&Some(true)) {
        return Some("it shares the node's namespaces".into());
    }
    if stored.security_context.as_ref().map(|s| (s.run_as_user, s.run_as_group, s.run_as_non_root))
        != expected.security_context.as_ref().map(|s| (s.run_as_user, s.run_as_group, s.run_as_non_root))
    {
        return Some("its Pod security context differs".into());
    }
    stored.containers.iter().zip(&expected.containers).find_map(|(got, want)| container_mismatch(got, want))
}

fn container_mismatch(got: &Container, want: &Container) -> Option<String> {
    let differs = |what: &str| Some(format!("container {:?}: its {what} differs", got.name));
    if got.name != want.name {
        return Some(format!("container {:?} is not {:?}", got.name, want.name));
    }
    if got.image != want.image {
        return differs("image");
    }
    if got.command.as_ref().is_some_and(|c| !c.is_empty()) && got.command != want.command {
        return differs("command");
    }
    if got.args != want.args {
        return differs("arguments");
    }
    if got.env.as_ref().is_some_and(|e| !e.is_empty()) || got.env_from.as_ref().is_some_and(|e| !e.is_empty())
    {
        return differs("environment");
    }
    if got.volume_mounts.as_ref().is_some_and(|m| !m.is_empty()) {
        return differs("volume mounts");
    }
    if got.working_dir != want.working_dir && got.working_dir.is_some() {
        return differs("working directory");
    }
    if got.termination_message_path != want.termination_message_path {
        return differs("termination message path");
    }
    let security = |c: &Container| {
        c.security_context.as_ref().map(|s| {
            (
                s.allow_privilege_escalation,
                s.read_only_root_filesystem,
                s.privileged.unwrap_or(false),
                s.capabilities.as_ref().map(|c| (c.add.clone().unwrap_or_default(), c.drop.clone())),
            )
        })
    };
    if security(got) != security(want) {
        return differs("security context");
    }
    None
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::EnvVar;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;
    use crate::config::JobSettings;
    use crate::job::{MinerSettings, build_block_job};
    use crate::testing::workflow;

    fn built() -> Job {
        let job_settings = JobSettings {
            backoff_limit: 2,
            active_deadline_seconds: None,
            cpu_request: None,
            cpu_limit: None,
            memory_request: None,
            memory_limit: None,
        };
        let settings = MinerSettings {
            image: "miner:1",
            image_pull_policy: "IfNotPresent",
            threads: 1,
            job: &job_settings,
        };
        build_block_job(&workflow("w", 8, 2), 1, "GENESIS", 8, &settings)
    }

    fn pod_of(job: &Job, uid: &str) -> Pod {
        let spec = job.spec.clone().unwrap().template.spec.unwrap();
        let mut pod = Pod { spec: Some(spec), ..Default::default() };
        pod.metadata.owner_references =
            Some(vec![OwnerReference { controller: Some(true), uid: uid.into(), ..Default::default() }]);
        pod
    }

    #[test]
    fn the_operators_own_job_and_its_pods_pass() {
        let job = built();
        assert_eq!(job_mismatch(&job, &built()), None);
        let pod = pod_of(&job, "job-uid");
        assert!(controlled_by(&pod.metadata, "job-uid"));
        assert_eq!(pod_mismatch(&pod, &job), None);
    }

    #[test]
    fn a_pod_with_only_the_jobs_label_or_another_owner_is_not_the_jobs() {
        let job = built();
        let mut pod = pod_of(&job, "someone-else");
        assert!(!controlled_by(&pod.metadata, "job-uid"));
        pod.metadata.owner_references = None;
        assert!(!controlled_by(&pod.metadata, "job-uid"));
        assert!(!controlled_by(&pod.metadata, ""), "an empty uid matches nothing");
    }

    #[test]
    fn a_forged_pod_that_runs_anything_else_is_never_the_jobs() {
        let job = built();
        type Forgery = fn(&mut PodSpec);
        let cases: [(&str, Forgery); 7] = [
            ("image", |s| s.containers[0].image = Some("evil:1".into())),
            ("command", |s| s.containers[0].command = Some(vec!["/bin/sh".into(), "-c".into()])),
            ("arguments", |s| s.containers[0].args = Some(vec!["echo".into(), "{}".into()])),
            ("environment", |s| {
                s.containers[0].env = Some(vec![EnvVar { name: "X".into(), ..Default::default() }])
            }),
            ("containers", |s| s.containers.push(s.containers[0].clone())),
            ("init containers", |s| s.init_containers = Some(vec![s.containers[0].clone()])),
            ("ServiceAccount", |s| s.service_account_name = Some("admin".into())),
        ];
        for (what, forge) in cases {
            let mut pod = pod_of(&job, "job-uid");
            forge(pod.spec.as_mut().unwrap());
            let why = pod_mismatch(&pod, &job).unwrap_or_else(|| panic!("a forged {what} passed"));
            assert!(!why.is_empty(), "{what}");
            // The same forgery in a Job's template makes the Job foreign.
            let mut foreign = built();
            forge(foreign.spec.as_mut().unwrap().template.spec.as_mut().unwrap());
            assert!(job_mismatch(&foreign, &built()).is_some(), "a Job with a forged {what} passed");
        }
    }

    #[test]
    fn defaults_the_api_server_adds_do_not_make_a_job_foreign() {
        let mut stored = built();
        let spec = stored.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        spec.dns_policy = Some("ClusterFirst".into());
        spec.scheduler_name = Some("default-scheduler".into());
        spec.termination_grace_period_seconds = Some(30);
        spec.containers[0].termination_message_policy = Some("FallbackToLogsOnError".into());
        assert_eq!(job_mismatch(&stored, &built()), None);
    }
}
