//! The one Job of a tool run (pure): the run's snapshot of its tool's
//! template, owned by the run, labelled as ours, with the arguments handed
//! over as data.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::EnvVar;
use kube::Resource as _;
use mining_api::tool::{ARGUMENTS_ENV, RUN_ENV};
use mining_api::{ToolRun, labels};

use crate::job::MANAGER;

/// The Job that runs `run`, named as the run.
///
/// The template is the tool author's, with four things the operator
/// decides: the owner (the run, so the Job goes with it), our labels (so
/// the run's Jobs are found and no template label can pose as ours), the
/// two environment variables every container gets — replacing any the
/// template set under those names, so only the frontend's validated
/// arguments reach the tool — and a run of N parts becoming an Indexed Job.
pub fn job_for_run(run: &ToolRun) -> Option<Job> {
    let name = run.metadata.name.clone()?;
    let owner = run.controller_owner_ref(&())?;
    let mut template = run.spec.job_template.clone();
    let mut spec = template.spec.take()?;
    let ours: BTreeMap<String, String> =
        [(labels::TOOL_RUN.to_string(), name.clone()), (labels::MANAGED_BY.to_string(), MANAGER.to_string())]
            .into();
    let pod_metadata = spec.template.metadata.get_or_insert_with(Default::default);
    pod_metadata.labels.get_or_insert_with(Default::default).extend(ours.clone());
    let pod = spec.template.spec.as_mut()?;
    if pod.restart_policy.is_none() {
        pod.restart_policy = Some("Never".into());
    }
    let handed_over = [(ARGUMENTS_ENV, run.spec.arguments.as_str()), (RUN_ENV, name.as_str())];
    for container in pod.init_containers.iter_mut().flatten().chain(pod.containers.iter_mut()) {
        let env = container.env.get_or_insert_with(Vec::new);
        env.retain(|var| !handed_over.iter().any(|(key, _)| var.name == *key));
        env.extend(handed_over.iter().map(|(key, value)| EnvVar {
            name: key.to_string(),
            value: Some(value.to_string()),
            value_from: None,
        }));
    }
    if spec.completions.is_some_and(|parts| parts > 1) {
        spec.completion_mode = Some("Indexed".into());
    }
    // A ttl on the Job would delete it, and its result, before the run read it.
    spec.ttl_seconds_after_finished = None;
    let mut metadata = template.metadata.take().unwrap_or_default();
    metadata.name = Some(name);
    metadata.namespace = run.metadata.namespace.clone();
    metadata.generate_name = None;
    metadata.labels.get_or_insert_with(Default::default).extend(ours);
    metadata.owner_references = Some(vec![owner]);
    Some(Job { metadata, spec: Some(spec), status: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn run(template: serde_json::Value, arguments: &str) -> ToolRun {
        let mut run: ToolRun = serde_json::from_value(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
            "metadata": {"name": "mw-abc", "namespace": "tools", "uid": "run-uid"},
            "spec": {"tool": "sum", "arguments": arguments, "jobTemplate": template},
        }))
        .unwrap();
        run.metadata.labels = Some([(labels::CALLER.to_string(), "label".to_string())].into());
        run
    }

    fn template() -> serde_json::Value {
        json!({"metadata": {"labels": {"team": "a", labels::TOOL_RUN: "forged"}},
               "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 0, "template": {"spec": {"containers": [
                   {"name": "tool", "image": "example/sum", "command": ["/sum"],
                    "env": [{"name": ARGUMENTS_ENV, "value": "planted"}, {"name": "KEEP", "value": "1"}]}]}}}})
    }

    #[test]
    fn the_arguments_reach_every_container_as_one_variable_and_nowhere_else() {
        let arguments = r#"{"text":"\"; rm -rf / $(reboot)\n"}"#;
        let job = job_for_run(&run(template(), arguments)).unwrap();
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let container = &pod.containers[0];
        let env = container.env.as_ref().unwrap();
        let values: Vec<_> = env.iter().filter(|v| v.name == ARGUMENTS_ENV).collect();
        assert_eq!(values.len(), 1, "the template's own value is replaced");
        assert_eq!(values[0].value.as_deref(), Some(arguments));
        assert!(env.iter().any(|v| v.name == "KEEP"));
        assert!(env.iter().any(|v| v.name == RUN_ENV && v.value.as_deref() == Some("mw-abc")));
        assert_eq!(
            container.command.as_deref(),
            Some(&["/sum".to_string()][..]),
            "the command is the author's"
        );
        assert_eq!(container.args, None);
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn the_job_is_the_runs_and_labelled_as_ours() {
        let job = job_for_run(&run(template(), "{}")).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("mw-abc"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ToolRun", "run-uid", Some(true))
        );
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[labels::TOOL_RUN], "mw-abc", "no template label poses as ours");
        assert_eq!(labels["team"], "a");
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(
            spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap()[labels::TOOL_RUN],
            "mw-abc"
        );
        assert_eq!(spec.ttl_seconds_after_finished, None);
        assert_eq!(spec.completion_mode, None);
    }

    #[test]
    fn parts_make_an_indexed_job() {
        let mut template = template();
        template["spec"]["completions"] = json!(4);
        let job = job_for_run(&run(template, "{}")).unwrap();
        assert_eq!(job.spec.unwrap().completion_mode.as_deref(), Some("Indexed"));
    }
}
