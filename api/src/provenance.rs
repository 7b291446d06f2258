//! Whether a Pod is one its Job made (pure), for every kind of work and
//! every reader: the operator before it reads a result, the CLI before it
//! shows a Pod or prints its logs.
//!
//! Anyone who may create Pods in the namespace can copy a Job's labels and
//! a controller ownerReference naming it (uids are readable), and the Job
//! controller then counts the copy. What a copy cannot do and still pass is
//! run anything but what the Job's stored template runs: the Job controller
//! makes its Pods from that template, and the same API server defaulted
//! both, so they are compared as stored. What admission adds beside the
//! template's own containers is set aside when it cannot reach them
//! ([`crate::admitted`]), and so is the ServiceAccount token's volume. A
//! copy that passes computes the honest answer.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::admitted::{self, Reads};

/// Where the ServiceAccount admission mounts a Pod's token: the one volume
/// (and mount) a Pod may have that its template has not.
const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Whether `meta` names `uid` as its controller (a claim: see the module's doc).
pub fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    !uid.is_empty()
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

/// Whether `pod` is one `job` made: controlled by it and running exactly its
/// template ([`pod_mismatch`]).
pub fn is_jobs_pod(pod: &Pod, job: &Job, reads: Reads) -> bool {
    job.metadata.uid.as_deref().is_some_and(|uid| controlled_by(&pod.metadata, uid))
        && pod_mismatch(pod, job, reads).is_none()
}

/// How a Pod differs from what its Job's stored template runs (`None`: the
/// Job controller made it from that template). `reads` is what the
/// template's containers depend on besides their own files (the kind's
/// [`crate::Work::READS`]).
pub fn pod_mismatch(pod: &Pod, job: &Job, reads: Reads) -> Option<String> {
    let (Some(stored), Some(want)) = (pod.spec.as_ref(), template(job)) else {
        return Some("it has no spec".into());
    };
    let own = match admitted::strip(stored, want, reads) {
        Ok(own) => own,
        Err(why) => return Some(why),
    };
    let got = &own;
    if got.service_account_name.as_deref().unwrap_or("default")
        != want.service_account_name.as_deref().unwrap_or("default")
    {
        return Some("it runs as another ServiceAccount".into());
    }
    if got.automount_service_account_token != want.automount_service_account_token {
        return Some("its ServiceAccount token mount differs".into());
    }
    if [got.host_network, got.host_pid, got.host_ipc] != [want.host_network, want.host_pid, want.host_ipc]
        || got.share_process_namespace != want.share_process_namespace
    {
        return Some("it shares other namespaces".into());
    }
    if !keeps_what_is_set(&got.security_context, &want.security_context) {
        return Some("its Pod security context differs".into());
    }
    if own_volumes(got) != want.volumes.iter().flatten().collect::<Vec<_>>() {
        return Some("its volumes differ".into());
    }
    containers_mismatch(got, want, |got, want| {
        if got.image != want.image {
            return Some("image");
        }
        if got.command != want.command || got.args != want.args || got.working_dir != want.working_dir {
            return Some("command");
        }
        if got.env != want.env || got.env_from != want.env_from {
            return Some("environment");
        }
        if own_mounts(got) != own_mounts(want) {
            return Some("volume mounts");
        }
        if got.termination_message_path != want.termination_message_path
            || got.termination_message_policy != want.termination_message_policy
        {
            return Some("termination message");
        }
        if !keeps_what_is_set(&got.security_context, &want.security_context) {
            return Some("security context");
        }
        None
    })
}

/// Whether `got` has every field `want` sets, with the same value: what
/// admission adds where the template is silent (a policy engine's default
/// `seccompProfile` or `fsGroup`) is accepted, what it changes is not.
fn keeps_what_is_set<T: serde::Serialize>(got: &T, want: &T) -> bool {
    fn within(got: &serde_json::Value, want: &serde_json::Value) -> bool {
        match (got, want) {
            (serde_json::Value::Object(got), serde_json::Value::Object(want)) => want
                .iter()
                .all(|(key, value)| value.is_null() || got.get(key).is_some_and(|g| within(g, value))),
            _ => got == want,
        }
    }
    match (serde_json::to_value(got), serde_json::to_value(want)) {
        (Ok(got), Ok(want)) => within(&got, &want),
        _ => false,
    }
}

/// The first container (init containers first) whose `differs` names a
/// difference, or a different set of containers.
pub fn containers_mismatch(
    got: &PodSpec,
    want: &PodSpec,
    differs: impl Fn(&Container, &Container) -> Option<&'static str>,
) -> Option<String> {
    let lists = [
        (got.init_containers.as_deref(), want.init_containers.as_deref()),
        (Some(&got.containers[..]), Some(&want.containers[..])),
    ];
    for (got, want) in lists {
        let (got, want) = (got.unwrap_or_default(), want.unwrap_or_default());
        if got.len() != want.len() {
            return Some(format!("it runs {} containers where {} were expected", got.len(), want.len()));
        }
        for (got, want) in got.iter().zip(want) {
            if got.name != want.name {
                return Some(format!("container {:?} is not {:?}", got.name, want.name));
            }
            if let Some(what) = differs(got, want) {
                return Some(format!("container {:?}: its {what} differs", got.name));
            }
        }
    }
    None
}

fn template(job: &Job) -> Option<&PodSpec> {
    job.spec.as_ref()?.template.spec.as_ref()
}

/// A container's volume mounts less the ServiceAccount token's.
fn own_mounts(container: &Container) -> Vec<&VolumeMount> {
    container.volume_mounts.iter().flatten().filter(|m| m.mount_path != TOKEN_MOUNT_PATH).collect()
}

/// A Pod's volumes less the ServiceAccount token's.
fn own_volumes(pod: &PodSpec) -> Vec<&Volume> {
    let token_volumes: Vec<&str> = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .filter(|m| m.mount_path == TOKEN_MOUNT_PATH)
        .map(|m| m.name.as_str())
        .collect();
    pod.volumes.iter().flatten().filter(|v| !token_volumes.contains(&v.name.as_str())).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::inject_mesh;

    fn job() -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": "work-1", "uid": "job-uid"},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true},
                "containers": [{"name": "work", "image": "example/work:1", "args": ["--index", "1"],
                    "env": [{"name": "TRACEPARENT", "value": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}],
                    "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true}}]}}}}))
        .expect("a valid Job")
    }

    /// A Pod as the Job controller makes it from `job`, controlled by it,
    /// with what the API server and kubelet add.
    fn made_from(job: &Job) -> Pod {
        let mut pod: Pod = serde_json::from_value(json!({"metadata": {"name": "work-1-abcde",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "work-1",
                                 "uid": "job-uid", "controller": true}]}}))
        .expect("a valid Pod");
        let mut spec = template(job).expect("a template").clone();
        spec.node_name = Some("node".into());
        pod.spec = Some(spec);
        pod
    }

    #[test]
    fn the_job_controllers_pod_is_the_jobs_whatever_reads_it() {
        let job = job();
        for reads in [Reads::Nothing, Reads::Network] {
            assert_eq!(pod_mismatch(&made_from(&job), &job, reads), None);
            assert!(is_jobs_pod(&made_from(&job), &job, reads));
        }
    }

    #[test]
    fn a_pod_claiming_the_job_that_runs_anything_else_is_never_the_jobs() {
        let job = job();
        type Forgery = fn(&mut PodSpec);
        let forgeries: [(&str, Forgery); 11] = [
            ("image", |s| s.containers[0].image = Some("attacker/echo".into())),
            ("command", |s| {
                s.containers[0].command = Some(vec!["sh".into(), "-c".into(), "echo '{}'".into()])
            }),
            ("arguments", |s| s.containers[0].args = Some(vec!["--index".into(), "2".into()])),
            ("environment", |s| s.containers[0].env.as_mut().unwrap()[0].name = "LD_PRELOAD".into()),
            ("a second copy of the container", |s| s.containers.push(s.containers[0].clone())),
            ("a privileged companion", |s| {
                let mut extra = Container { name: "x".into(), ..Default::default() };
                extra.security_context.get_or_insert_default().privileged = Some(true);
                s.containers.push(extra)
            }),
            ("a volume over its files", |s| {
                s.volumes = Some(vec![serde_json::from_value(json!({"name": "v", "emptyDir": {}})).unwrap()]);
                s.containers[0].volume_mounts =
                    Some(vec![serde_json::from_value(json!({"name": "v", "mountPath": "/bin"})).unwrap()]);
            }),
            ("the process namespace shared", |s| {
                s.containers.push(Container { name: "x".into(), ..Default::default() });
                s.share_process_namespace = Some(true)
            }),
            ("the node's namespaces", |s| s.host_pid = Some(true)),
            ("another ServiceAccount", |s| s.service_account_name = Some("admin".into())),
            ("a changed security context", |s| {
                s.containers[0].security_context.as_mut().unwrap().allow_privilege_escalation = Some(true)
            }),
        ];
        for (what, forge) in forgeries {
            let mut pod = made_from(&job);
            forge(pod.spec.as_mut().unwrap());
            for reads in [Reads::Nothing, Reads::Network] {
                assert!(pod_mismatch(&pod, &job, reads).is_some(), "{what} passed ({reads:?})");
                assert!(!is_jobs_pod(&pod, &job, reads), "{what} passed ({reads:?})");
            }
        }
    }

    #[test]
    fn a_pod_the_job_does_not_control_is_not_its_own_however_it_runs() {
        let job = job();
        let mut pod = made_from(&job);
        pod.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        assert!(!is_jobs_pod(&pod, &job, Reads::Nothing));
        pod.metadata.owner_references.as_mut().unwrap()[0].controller = None;
        pod.metadata.owner_references.as_mut().unwrap()[0].uid = "job-uid".into();
        assert!(!is_jobs_pod(&pod, &job, Reads::Nothing), "an owner that is not the controller");
        let mut uidless = job.clone();
        uidless.metadata.uid = None;
        assert!(!is_jobs_pod(&made_from(&job), &uidless, Reads::Nothing), "an empty uid matches nothing");
    }

    #[test]
    fn what_admission_adds_is_set_aside_unless_it_reaches_the_containers() {
        let job = job();
        let mut pod = made_from(&job);
        let spec = pod.spec.as_mut().unwrap();
        spec.security_context.get_or_insert_default().fs_group = Some(2000);
        spec.volumes = Some(vec![
            serde_json::from_value(
                json!({"name": "default-token-x", "secret": {"secretName": "default-token-x"}}),
            )
            .unwrap(),
        ]);
        spec.containers[0].volume_mounts = Some(vec![
            serde_json::from_value(json!({"name": "default-token-x", "mountPath": TOKEN_MOUNT_PATH}))
                .unwrap(),
        ]);
        inject_mesh(spec);
        assert_eq!(pod_mismatch(&pod, &job, Reads::Nothing), None, "a mesh reaches nothing of a miner's");
        let why =
            pod_mismatch(&pod, &job, Reads::Network).expect("a mesh's init container redirects traffic");
        assert!(why.contains("NET_ADMIN"), "{why}");
        pod.spec.as_mut().unwrap().init_containers = None;
        assert_eq!(pod_mismatch(&pod, &job, Reads::Network), None, "the same mesh in its CNI mode");
    }
}
