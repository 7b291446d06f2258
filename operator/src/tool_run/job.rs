//! The one Job of a tool run (pure): the run's snapshot of its tool's
//! template, owned by the run, labelled as ours, with the arguments handed
//! over as data.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Capabilities, EnvVar, EnvVarSource, PodSecurityContext, SeccompProfile, Secret, SecretKeySelector,
    SecurityContext,
};
use kube::Resource as _;
use mining_api::tool::{ARGUMENTS_ENV, ARGUMENTS_KEY, RUN_ENV, arguments_secret_name};
use mining_api::tool_caller::{CALLER_CLAIMS_ENV, CALLER_CLAIMS_KEY, CALLER_ENV, CALLER_KEY};
use mining_api::tool_input::{INPUT_ENV, INPUT_KEY, STATE_ENV, STATE_KEY, STEP_ENV, input_secret_name};
use mining_api::tool_outputs::{ENV_OUTPUTS_TOKEN, ENV_OUTPUTS_URL, SECRET_KEY_OUTPUTS_TOKEN};
use mining_api::{ToolRun, labels};

use crate::outputs::HandOver;
use crate::work::MANAGER;

/// The Job that runs `run`'s current step, named as the run (the first
/// step) or `{run}-s{step}` (each step after a round of answers).
///
/// The template is the tool author's, with five things the operator
/// decides: the owner (the run, so the Job goes with it), our labels (so
/// the run's Jobs are found and no template label can pose as ours), the
/// two environment variables every container gets — replacing any the
/// template set under those names, so only the frontend's validated
/// arguments reach the tool: read from the run's own Secret
/// ([`arguments_secret`]), so the Job and Pods that `view` can read hold
/// only a reference, and the kubelet expands nothing in them — a run of N
/// parts becoming an Indexed Job, and safe defaults where the template is
/// silent ([`secure_defaults`]).
pub fn job_for_run(run: &ToolRun, outputs: Option<&HandOver>) -> Option<Job> {
    let name = run.metadata.name.clone()?;
    let job_name = run.job_name();
    let step = run.step();
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
    secure_defaults(pod);
    let from_secret = |env: &str, secret: String, key: &str| EnvVar {
        name: env.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector { name: secret, key: key.into(), optional: None }),
            ..Default::default()
        }),
    };
    let mut handed_over = vec![
        from_secret(ARGUMENTS_ENV, arguments_secret_name(&name), ARGUMENTS_KEY),
        EnvVar { name: RUN_ENV.into(), value: Some(name.clone()), value_from: None },
        EnvVar { name: STEP_ENV.into(), value: Some(step.to_string()), value_from: None },
    ];
    // A step after a round of answers reads them, and the state the step
    // before it left, from its own Secret; the first step gets neither
    // (and no template can pose as having them: the names are ours).
    if step > 0 {
        handed_over.push(from_secret(INPUT_ENV, input_secret_name(&name, step), INPUT_KEY));
        handed_over.push(from_secret(STATE_ENV, input_secret_name(&name, step), STATE_KEY));
    }
    // Who called, for a tool that asked (the frontend recorded it under the
    // run's proof), from the same Secret as the arguments.
    if let Some(caller) = &run.spec.caller {
        handed_over.push(from_secret(CALLER_ENV, arguments_secret_name(&name), CALLER_KEY));
        if caller.claims.is_some() {
            handed_over.push(from_secret(CALLER_CLAIMS_ENV, arguments_secret_name(&name), CALLER_CLAIMS_KEY));
        }
    }
    // Where and with what the tool uploads its files, when the operator keeps them.
    if let Some(outputs) = outputs {
        handed_over.push(EnvVar {
            name: ENV_OUTPUTS_URL.into(),
            value: Some(outputs.url.clone()),
            value_from: None,
        });
        handed_over.push(from_secret(
            ENV_OUTPUTS_TOKEN,
            arguments_secret_name(&name),
            SECRET_KEY_OUTPUTS_TOKEN,
        ));
    }
    let reserved = [
        ARGUMENTS_ENV,
        RUN_ENV,
        STEP_ENV,
        INPUT_ENV,
        STATE_ENV,
        CALLER_ENV,
        CALLER_CLAIMS_ENV,
        ENV_OUTPUTS_URL,
        ENV_OUTPUTS_TOKEN,
    ];
    for container in pod.init_containers.iter_mut().flatten().chain(pod.containers.iter_mut()) {
        let env = container.env.get_or_insert_with(Vec::new);
        env.retain(|var| !reserved.contains(&var.name.as_str()));
        env.extend(handed_over.iter().cloned());
    }
    if spec.completions.is_some_and(|parts| parts > 1) {
        spec.completion_mode = Some("Indexed".into());
    }
    // A ttl on the Job would delete it, and its result, before the run read it.
    spec.ttl_seconds_after_finished = None;
    let mut metadata = template.metadata.take().unwrap_or_default();
    metadata.name = Some(job_name);
    metadata.namespace = run.metadata.namespace.clone();
    metadata.generate_name = None;
    metadata.labels.get_or_insert_with(Default::default).extend(ours);
    metadata.owner_references = Some(vec![owner]);
    Some(Job { metadata, spec: Some(spec), status: None })
}

/// The Secret of `run`'s arguments: named after the run, owned by it (so it
/// goes with it), labelled as ours, immutable (so nobody edits it in place;
/// a replacement has another uid, which the run recorded).
pub fn arguments_secret(run: &ToolRun, outputs: Option<&HandOver>) -> Option<Secret> {
    let name = run.metadata.name.clone()?;
    run_secret(run, arguments_secret_name(&name), arguments_data(run, outputs))
}

/// The Secret of the answers and state step `step` of `run` reads, made
/// the way [`arguments_secret`] is.
pub fn input_secret(run: &ToolRun, step: u32, data: &StepData) -> Option<Secret> {
    let name = run.metadata.name.clone()?;
    run_secret(run, input_secret_name(&name, step), data.as_secret_data())
}

/// What a step after a round of answers is handed.
#[derive(Debug, Clone, PartialEq)]
pub struct StepData {
    /// The round's answers, key → the client's result (JSON).
    pub input: String,
    /// The state the step before it left.
    pub state: String,
}

impl StepData {
    fn as_secret_data(&self) -> BTreeMap<String, ByteString> {
        [
            (INPUT_KEY.to_string(), ByteString(self.input.clone().into_bytes())),
            (STATE_KEY.to_string(), ByteString(self.state.clone().into_bytes())),
        ]
        .into()
    }
}

fn arguments_data(run: &ToolRun, outputs: Option<&HandOver>) -> BTreeMap<String, ByteString> {
    let mut data: BTreeMap<String, ByteString> =
        [(ARGUMENTS_KEY.to_string(), ByteString(run.spec.arguments.clone().into_bytes()))].into();
    if let Some(caller) = &run.spec.caller {
        data.insert(CALLER_KEY.into(), ByteString(caller.subject.clone().into_bytes()));
        if let Some(claims) = &caller.claims {
            data.insert(CALLER_CLAIMS_KEY.into(), ByteString(claims.clone().into_bytes()));
        }
    }
    if let Some(outputs) = outputs {
        data.insert(SECRET_KEY_OUTPUTS_TOKEN.into(), ByteString(outputs.token.clone().into_bytes()));
    }
    data
}

fn run_secret(run: &ToolRun, secret_name: String, data: BTreeMap<String, ByteString>) -> Option<Secret> {
    let name = run.metadata.name.clone()?;
    let owner = run.controller_owner_ref(&())?;
    let labels: BTreeMap<String, String> =
        [(labels::TOOL_RUN.to_string(), name), (labels::MANAGED_BY.to_string(), MANAGER.to_string())].into();
    Some(Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret_name),
            namespace: run.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        immutable: Some(true),
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    })
}

/// Whether `stored` is the Secret `built` for `run`: controlled by the run
/// and holding exactly the data it was to hold.
pub fn is_secret_of(stored: &Secret, built: &Secret, run: &ToolRun) -> bool {
    let run_uid = run.metadata.uid.as_deref().unwrap_or_default();
    mining_api::provenance::controlled_by(&stored.metadata, run_uid) && stored.data == built.data
}

/// Where the template says nothing: no ServiceAccount token (a tool that
/// needs the API asks for it), and the Pod Security "restricted" settings
/// field by field (non-root, the runtime's seccomp profile, no privilege
/// escalation, no capabilities). Every field the template sets is kept,
/// even one "restricted" refuses: the namespace's Pod Security admission
/// decides, and the run fails at once with its words (`pod_start`).
fn secure_defaults(pod: &mut k8s_openapi::api::core::v1::PodSpec) {
    pod.automount_service_account_token.get_or_insert(false);
    let context = pod.security_context.get_or_insert_with(PodSecurityContext::default);
    context.run_as_non_root.get_or_insert(true);
    context
        .seccomp_profile
        .get_or_insert_with(|| SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None });
    for container in pod.init_containers.iter_mut().flatten().chain(pod.containers.iter_mut()) {
        let context = container.security_context.get_or_insert_with(SecurityContext::default);
        context.allow_privilege_escalation.get_or_insert(false);
        let capabilities = context.capabilities.get_or_insert_with(Capabilities::default);
        capabilities.drop.get_or_insert_with(|| vec!["ALL".into()]);
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
    fn the_arguments_reach_every_container_from_the_runs_secret_and_nowhere_else() {
        let arguments = r#"{"text":"\"; rm -rf / $(API_KEY)\n"}"#;
        let run = run(template(), arguments);
        let job = job_for_run(&run, None).unwrap();
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let container = &pod.containers[0];
        let env = container.env.as_ref().unwrap();
        let values: Vec<_> = env.iter().filter(|v| v.name == ARGUMENTS_ENV).collect();
        assert_eq!(values.len(), 1, "the template's own value is replaced");
        assert_eq!(values[0].value, None, "the Job (readable with view) holds no arguments");
        let reference = values[0].value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
        assert_eq!((reference.name.as_str(), reference.key.as_str()), ("mw-abc-arguments", ARGUMENTS_KEY));
        assert!(!serde_json::to_string(&job).unwrap().contains("rm -rf"), "nowhere in the Job");
        assert!(env.iter().any(|v| v.name == "KEEP"));
        assert!(env.iter().any(|v| v.name == RUN_ENV && v.value.as_deref() == Some("mw-abc")));
        assert_eq!(
            container.command.as_deref(),
            Some(&["/sum".to_string()][..]),
            "the command is the author's"
        );
        assert_eq!(container.args, None);
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));

        let secret = arguments_secret(&run, None).unwrap();
        assert_eq!(secret.immutable, Some(true));
        assert!(is_secret_of(&secret, &secret, &run));
        assert_eq!(secret.data.as_ref().unwrap()[ARGUMENTS_KEY].0, arguments.as_bytes());
        let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("run-uid", Some(true)));
        let mut planted = secret.clone();
        planted.data.as_mut().unwrap().insert(ARGUMENTS_KEY.into(), ByteString(b"{}".to_vec()));
        assert!(!is_secret_of(&planted, &secret, &run), "other arguments");
        planted = secret.clone();
        planted.metadata.owner_references = None;
        assert!(!is_secret_of(&planted, &secret, &run), "not the run's");
    }

    #[test]
    fn only_a_tool_that_asked_learns_who_called_and_no_template_can_pose_as_it() {
        let mut template = template();
        template["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": CALLER_ENV, "value": "admin"}, {"name": CALLER_CLAIMS_ENV, "value": "{}"}]);
        let env_of =
            |job: &Job| job.spec.clone().unwrap().template.spec.unwrap().containers[0].env.clone().unwrap();
        let silent = run(template.clone(), "{}");
        let env = env_of(&job_for_run(&silent, None).unwrap());
        assert!(
            !env.iter().any(|v| v.name == CALLER_ENV || v.name == CALLER_CLAIMS_ENV),
            "a tool that did not ask gets neither, whatever its template says: {env:?}"
        );
        assert_eq!(arguments_secret(&silent, None).unwrap().data.unwrap().len(), 1);

        let mut told = run(template, "{}");
        told.spec.caller = Some(mining_api::tool_caller::ToolCaller {
            subject: "system:serviceaccount:callers:alice".into(),
            claims: Some(r#"{"groups":["ops"]}"#.into()),
        });
        let env = env_of(&job_for_run(&told, None).unwrap());
        for (variable, key) in [(CALLER_ENV, CALLER_KEY), (CALLER_CLAIMS_ENV, CALLER_CLAIMS_KEY)] {
            let found: Vec<_> = env.iter().filter(|v| v.name == variable).collect();
            assert_eq!(found.len(), 1, "{variable}: the template's value is replaced");
            assert_eq!(found[0].value, None, "{variable}: the Job holds only a reference");
            let reference = found[0].value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
            assert_eq!((reference.name.as_str(), reference.key.as_str()), ("mw-abc-arguments", key));
        }
        let data = arguments_secret(&told, None).unwrap().data.unwrap();
        assert_eq!(data[CALLER_KEY].0, b"system:serviceaccount:callers:alice");
        assert_eq!(data[CALLER_CLAIMS_KEY].0, br#"{"groups":["ops"]}"#);
    }

    #[test]
    fn a_step_after_answers_has_its_own_job_reading_its_own_secret_and_no_template_can_pose_as_it() {
        let mut template = template();
        template["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": INPUT_ENV, "value": "{\"approve\":true}"}, {"name": STATE_ENV, "value": "forged"}]);
        let first = job_for_run(&run(template.clone(), "{}"), None).unwrap();
        let env_of =
            |job: &Job| job.spec.clone().unwrap().template.spec.unwrap().containers[0].env.clone().unwrap();
        let first_env = env_of(&first);
        assert!(
            !first_env.iter().any(|v| v.name == INPUT_ENV || v.name == STATE_ENV),
            "the first step is asked nothing"
        );
        assert_eq!(first_env.iter().find(|v| v.name == STEP_ENV).unwrap().value.as_deref(), Some("0"));
        let mut second = run(template, "{}");
        second.status = Some(mining_api::ToolRunStatus { step: Some(2), ..Default::default() });
        let job = job_for_run(&second, None).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("mw-abc-s2"));
        let env = env_of(&job);
        for (name, key) in [(INPUT_ENV, INPUT_KEY), (STATE_ENV, STATE_KEY)] {
            let vars: Vec<_> = env.iter().filter(|v| v.name == name).collect();
            assert_eq!(vars.len(), 1, "{name} once, from the step's Secret");
            let reference = vars[0].value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
            assert_eq!((reference.name.as_str(), reference.key.as_str()), ("mw-abc-input-2", key));
            assert_eq!(vars[0].value, None);
        }
        let data = StepData { input: "{}".into(), state: "s".into() };
        let secret = input_secret(&second, 2, &data).unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("mw-abc-input-2"));
        assert_eq!(secret.data.as_ref().unwrap()[STATE_KEY].0, b"s");
        let other =
            input_secret(&second, 2, &StepData { input: "{\"a\":1}".into(), state: "s".into() }).unwrap();
        assert!(!is_secret_of(&other, &secret, &second), "other answers");
    }

    #[test]
    fn the_job_is_the_runs_and_labelled_as_ours() {
        let job = job_for_run(&run(template(), "{}"), None).unwrap();
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
    fn a_silent_template_gets_no_token_and_the_restricted_settings() {
        let job = job_for_run(&run(template(), "{}"), None).unwrap();
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        let context = pod.security_context.unwrap();
        assert_eq!(context.run_as_non_root, Some(true));
        assert_eq!(context.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let container = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(container.allow_privilege_escalation, Some(false));
        assert_eq!(container.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));

        // What the author set is kept; what it left unset is completed,
        // field by field (a Pod context with only a user, as the demo's
        // tools have, still gets the seccomp profile "restricted" needs).
        let mut own = template();
        own["spec"]["template"]["spec"]["automountServiceAccountToken"] = json!(true);
        own["spec"]["template"]["spec"]["securityContext"] =
            json!({"runAsUser": 1000, "runAsNonRoot": false});
        own["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"runAsUser": 1000, "capabilities": {"add": ["NET_BIND_SERVICE"]}});
        let pod = job_for_run(&run(own, "{}"), None).unwrap().spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(true));
        let context = pod.security_context.unwrap();
        assert_eq!((context.run_as_user, context.run_as_non_root), (Some(1000), Some(false)));
        assert_eq!(context.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let container = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(container.run_as_user, Some(1000));
        assert_eq!(container.allow_privilege_escalation, Some(false));
        let capabilities = container.capabilities.unwrap();
        assert_eq!(capabilities.add, Some(vec!["NET_BIND_SERVICE".to_string()]));
        assert_eq!(capabilities.drop, Some(vec!["ALL".to_string()]));
        // An explicit value is the author's, even one "restricted" refuses.
        let mut loose = template();
        loose["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"allowPrivilegeEscalation": true, "capabilities": {"drop": ["NET_RAW"]}});
        let pod = job_for_run(&run(loose, "{}"), None).unwrap().spec.unwrap().template.spec.unwrap();
        let container = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(container.allow_privilege_escalation, Some(true));
        assert_eq!(container.capabilities.unwrap().drop, Some(vec!["NET_RAW".to_string()]));
    }

    #[test]
    fn parts_make_an_indexed_job() {
        let mut template = template();
        template["spec"]["completions"] = json!(4);
        let job = job_for_run(&run(template, "{}"), None).unwrap();
        assert_eq!(job.spec.unwrap().completion_mode.as_deref(), Some("Indexed"));
    }
}
