//! Whether a tool run's Job and Pods are the ones the operator made (pure).
//!
//! Anyone who may create Jobs or Pods in the namespace can copy a Job's
//! labels and a controller ownerReference naming it, and the Job controller
//! then adopts the copy and counts its success. So a Pod is read (result,
//! exit code, status line) only when it runs exactly what its Job's stored
//! template runs ([`mining_api::provenance`], shared by every kind), and
//! a Job is the run's only when its template runs what
//! [`super::job::job_for_run`] builds. A copy that passes both checks runs
//! the tool's own image on the caller's own arguments: it computes the
//! honest answer.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};
use mining_api::provenance::containers_mismatch;

/// How a stored Job's Pod template differs from the one built for its run
/// (`None`: it runs what the run asks). Only what decides what the Pods
/// compute is compared, so the API server's defaults change nothing.
pub fn job_mismatch(stored: &Job, built: &Job) -> Option<String> {
    let (Some(stored), Some(built)) = (template(stored), template(built)) else {
        return Some("it has no Pod template".into());
    };
    if stored.service_account_name.as_deref().unwrap_or("default")
        != built.service_account_name.as_deref().unwrap_or("default")
    {
        return Some("its ServiceAccount differs".into());
    }
    containers_mismatch(stored, built, |got, want| {
        if got.image != want.image {
            return Some("image");
        }
        if got.command != want.command {
            return Some("command");
        }
        if got.args != want.args {
            return Some("arguments");
        }
        if defaulted_env(got) != defaulted_env(want) {
            return Some("environment");
        }
        None
    })
}

/// A container's env with the API server's one default in it (a
/// `fieldRef`'s `apiVersion`), so a stored template equals the built one.
fn defaulted_env(container: &Container) -> Vec<EnvVar> {
    let mut env = container.env.clone().unwrap_or_default();
    for field in env.iter_mut().filter_map(|v| v.value_from.as_mut()?.field_ref.as_mut()) {
        field.api_version.get_or_insert_with(|| "v1".into());
    }
    env
}

fn template(job: &Job) -> Option<&PodSpec> {
    job.spec.as_ref()?.template.spec.as_ref()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use k8s_openapi::api::core::v1::Pod;
    use mining_api::{ToolRun, Work};

    use super::*;
    use crate::tool_run::job::job_for_run;
    use crate::tool_run::job::tests::run;

    /// Where the ServiceAccount admission mounts a Pod's token.
    const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

    /// The check every reader of a tool run's Pods makes.
    fn pod_mismatch(pod: &Pod, job: &Job) -> Option<String> {
        mining_api::provenance::pod_mismatch(pod, job, ToolRun::READS)
    }

    fn tool_template() -> serde_json::Value {
        json!({"spec": {"backoffLimit": 0, "template": {"spec": {"containers": [
            {"name": "tool", "image": "example/sum", "env": [{"name": "API_KEY", "value": "k"}]}]}}}})
    }

    /// A Pod as the Job controller makes it from `job`, with the token the
    /// ServiceAccount admission adds.
    fn made_from(job: &Job) -> Pod {
        let mut spec = super::template(job).unwrap().clone();
        spec.volumes.get_or_insert_with(Vec::new).push(
            serde_json::from_value(
                json!({"name": "default-token-x", "secret": {"secretName": "default-token-x"}}),
            )
            .unwrap(),
        );
        for container in &mut spec.containers {
            container.volume_mounts.get_or_insert_with(Vec::new).push(
                serde_json::from_value(json!({"name": "default-token-x", "mountPath": TOKEN_MOUNT_PATH}))
                    .unwrap(),
            );
        }
        spec.node_name = Some("node".into());
        Pod { spec: Some(spec), ..Default::default() }
    }

    #[test]
    fn the_job_controllers_pod_is_read() {
        let job = job_for_run(&run(tool_template(), r#"{"numbers":[1,2]}"#), None).unwrap();
        assert_eq!(pod_mismatch(&made_from(&job), &job), None);
        assert_eq!(job_mismatch(&job, &job), None);
    }

    #[test]
    fn a_planted_pod_posing_as_the_jobs_is_not_read() {
        let job = job_for_run(&run(tool_template(), r#"{"numbers":[1,2]}"#), None).unwrap();
        type Edit = fn(&mut PodSpec);
        let attacks: [(&str, Edit); 8] = [
            ("another image", |p| p.containers[0].image = Some("attacker/echo".into())),
            ("a command that prints a forged result", |p| {
                p.containers[0].command = Some(vec!["sh".into(), "-c".into(), "echo '{\"sum\":1337}'".into()])
            }),
            ("other arguments", |p| {
                p.containers[0].env.as_mut().unwrap().last_mut().unwrap().value = Some("{}".into())
            }),
            ("a second container that could redirect the tool's calls", |p| {
                let extra = p.containers[0].clone();
                let mut extra = Container { name: "x".into(), ..extra };
                extra.security_context.get_or_insert_default().capabilities.get_or_insert_default().add =
                    Some(vec!["NET_ADMIN".into()]);
                p.containers.push(extra)
            }),
            ("a privileged companion", |p| {
                let mut extra = Container { name: "x".into(), ..Default::default() };
                extra.security_context.get_or_insert_default().privileged = Some(true);
                p.containers.push(extra)
            }),
            ("a volume over the tool's files", |p| {
                p.volumes
                    .as_mut()
                    .unwrap()
                    .push(serde_json::from_value(json!({"name": "v", "emptyDir": {}})).unwrap());
                p.containers[0]
                    .volume_mounts
                    .as_mut()
                    .unwrap()
                    .push(serde_json::from_value(json!({"name": "v", "mountPath": "/app"})).unwrap())
            }),
            ("the process namespace shared with a companion", |p| {
                p.containers.push(Container { name: "x".into(), ..Default::default() });
                p.share_process_namespace = Some(true)
            }),
            ("the node's namespaces", |p| p.host_pid = Some(true)),
        ];
        for (attack, edit) in attacks {
            let mut pod = made_from(&job);
            edit(pod.spec.as_mut().unwrap());
            assert!(pod_mismatch(&pod, &job).is_some(), "{attack}");
        }
    }

    #[test]
    fn a_security_context_admission_completes_is_kept_and_one_it_changes_is_not() {
        let job = job_for_run(&run(tool_template(), r#"{"numbers":[1,2]}"#), None).unwrap();
        let mut defaulted = made_from(&job);
        let spec = defaulted.spec.as_mut().unwrap();
        spec.security_context.get_or_insert_default().fs_group = Some(2000);
        spec.containers[0].security_context.get_or_insert_default().read_only_root_filesystem = Some(true);
        assert_eq!(pod_mismatch(&defaulted, &job), None, "fields the template left unset, filled in");
        let mut changed = made_from(&job);
        let context = changed.spec.as_mut().unwrap().containers[0].security_context.get_or_insert_default();
        context.allow_privilege_escalation = Some(true);
        assert!(pod_mismatch(&changed, &job).is_some(), "a field the operator set, changed");
    }

    #[test]
    fn a_mesh_in_cni_mode_leaves_the_pod_the_jobs() {
        let job = job_for_run(&run(tool_template(), r#"{"numbers":[1,2]}"#), None).unwrap();
        let mut pod = made_from(&job);
        mining_api::testing::inject_mesh(pod.spec.as_mut().unwrap());
        let why = pod_mismatch(&pod, &job).unwrap();
        assert!(why.contains("NET_ADMIN"), "an init container that can redirect traffic: {why}");
        pod.spec.as_mut().unwrap().init_containers = None;
        assert_eq!(
            pod_mismatch(&pod, &job),
            None,
            "a proxy and Pod-local volumes reach nothing of the tool's"
        );
    }

    #[test]
    fn a_planted_job_running_something_else_is_not_the_runs() {
        let built = job_for_run(&run(tool_template(), r#"{"numbers":[1,2]}"#), None).unwrap();
        let mut planted = built.clone();
        planted.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image =
            Some("attacker/x".into());
        assert!(job_mismatch(&planted, &built).unwrap().contains("image"));
        let mut other_arguments = built.clone();
        other_arguments.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].env = None;
        assert!(job_mismatch(&other_arguments, &built).unwrap().contains("environment"));
    }
}
