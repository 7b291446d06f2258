//! The Job that mines one block (pure: no client).

use mining_api::Work as _;
use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Resource;
use mining_api::trace::{TRACEPARENT_ENV, TraceParent};
use mining_api::{MiningWorkflow, annotations, labels};
use serde_json::json;

use crate::config::JobSettings;
use crate::naming::{block_job_name, range_job_name, workflow_label};

/// The distroless `nonroot` user the miner image runs as.
const MINER_UID: i64 = 65532;
pub use crate::work::MANAGER;

/// What a block Job needs beyond the workflow itself.
#[derive(Debug, Clone)]
pub struct MinerSettings<'a> {
    pub image: &'a str,
    pub image_pull_policy: &'a str,
    /// The block Jobs' `imagePullSecrets` (a private registry's credentials).
    pub pull_secrets: &'a [String],
    pub threads: u32,
    pub job: &'a JobSettings,
    /// Where the miner reports its span, and in which protocol.
    pub otlp: Option<(&'a str, &'a str)>,
}

/// The environment a block Job's miner gets: only trace context and where to
/// report it (pure). Its values never change what the miner computes, so
/// provenance checks their names, not their values.
pub fn miner_env(workflow: &MiningWorkflow, settings: &MinerSettings) -> Vec<(String, String)> {
    let parent = workflow.annotation(annotations::TRACEPARENT).and_then(TraceParent::parse);
    let mut env: Vec<(String, String)> =
        parent.map(|p| (TRACEPARENT_ENV.to_string(), p.to_string())).into_iter().collect();
    if let Some((endpoint, protocol)) = settings.otlp {
        env.push((OTLP_ENDPOINT_ENV.into(), endpoint.into()));
        env.push((OTLP_PROTOCOL_ENV.into(), protocol.into()));
    }
    env
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT`, as the OpenTelemetry spec names it.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`.
pub const OTLP_PROTOCOL_ENV: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// Every environment variable a block Job may carry.
pub const MINER_ENV_NAMES: [&str; 3] = [TRACEPARENT_ENV, OTLP_ENDPOINT_ENV, OTLP_PROTOCOL_ENV];

/// Asks service meshes not to inject a proxy into a Pod (Istio's label and
/// annotation, Linkerd's annotation): the first line; provenance tolerates
/// a mesh that injects anyway ([`mining_api::admitted`]).
pub const MESH_OPT_OUT_LABELS: [(&str, &str); 1] = [("sidecar.istio.io/inject", "false")];
pub const MESH_OPT_OUT_ANNOTATIONS: [(&str, &str); 2] =
    [("sidecar.istio.io/inject", "false"), ("linkerd.io/inject", "disabled")];

pub use crate::work::{is_queued, queue_job};

/// Labels on a block's Job and its Pods.
pub fn block_labels(workflow: &str, block: u32) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::WORKFLOW.to_string(), workflow_label(workflow)),
        (labels::BLOCK.to_string(), block.to_string()),
        (labels::MANAGED_BY.to_string(), MANAGER.to_string()),
    ])
}

/// Builds the Job for block `block` with previous hash `prev`.
pub fn build_block_job(
    workflow: &MiningWorkflow,
    block: u32,
    prev: &str,
    difficulty: u32,
    settings: &MinerSettings,
) -> Job {
    build_job(workflow, block, prev, difficulty, None, settings)
}

/// Builds the Job that mines `count` nonces from `start` of block `block`:
/// the same Pod as a whole block's, told its range, with the range in
/// annotations for the operator to read back.
pub fn build_range_job(
    workflow: &MiningWorkflow,
    block: u32,
    prev: &str,
    difficulty: u32,
    (start, count): (u64, u64),
    settings: &MinerSettings,
) -> Job {
    build_job(workflow, block, prev, difficulty, Some((start, count)), settings)
}

/// The Job the operator builds for `block` (and `range`) of `workflow`, when
/// the block's previous hash is known: the first block's is GENESIS, any
/// other's the recorded hash before it.
pub fn job_for_block(
    workflow: &MiningWorkflow,
    block: u32,
    range: Option<(u64, u64)>,
    settings: &MinerSettings,
) -> Option<Job> {
    let prev = match block.checked_sub(2) {
        None => mining_api::GENESIS.to_string(),
        Some(before) => workflow.mined_blocks().get(usize::try_from(before).ok()?)?.hash.clone(),
    };
    let difficulty = workflow.mined_difficulty();
    Some(match range {
        None => build_block_job(workflow, block, &prev, difficulty, settings),
        Some(range) => build_range_job(workflow, block, &prev, difficulty, range, settings),
    })
}

fn build_job(
    workflow: &MiningWorkflow,
    block: u32,
    prev: &str,
    difficulty: u32,
    range: Option<(u64, u64)>,
    settings: &MinerSettings,
) -> Job {
    let name = workflow.metadata.name.clone().unwrap_or_default();
    let uid = workflow.metadata.uid.as_deref().unwrap_or_default();
    let (job_name, annotations, mut args) = match range {
        None => (block_job_name(&name, uid, block), None, vec![]),
        Some((start, count)) => (
            range_job_name(&name, uid, block, start),
            Some(BTreeMap::from([
                (annotations::NONCE_START.to_string(), start.to_string()),
                (annotations::NONCE_COUNT.to_string(), count.to_string()),
            ])),
            vec!["--start".to_string(), start.to_string(), "--count".to_string(), count.to_string()],
        ),
    };
    let mut all_args: Vec<String> = ["mine", "--index", &block.to_string(), "--prev", prev]
        .into_iter()
        .map(String::from)
        .chain([
            "--difficulty".into(),
            difficulty.to_string(),
            "--threads".into(),
            settings.threads.to_string(),
        ])
        .collect();
    all_args.append(&mut args);
    let labels = block_labels(&name, block);
    let mut pod_labels = labels.clone();
    pod_labels.extend(MESH_OPT_OUT_LABELS.map(|(k, v)| (k.to_string(), v.to_string())));
    let pod_annotations: BTreeMap<String, String> =
        MESH_OPT_OUT_ANNOTATIONS.map(|(k, v)| (k.to_string(), v.to_string())).into();
    let env: Vec<_> = miner_env(workflow, settings)
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    let env = (!env.is_empty()).then_some(env);
    let owner = workflow.controller_owner_ref(&()).expect("a stored workflow has a name and uid");
    let quantities = |pairs: [(&str, &Option<String>); 2]| -> Option<BTreeMap<String, Quantity>> {
        let map: BTreeMap<_, _> = pairs
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), Quantity(v.clone()))))
            .collect();
        (!map.is_empty()).then_some(map)
    };
    let resources = json!({
        "requests": quantities([("cpu", &settings.job.cpu_request), ("memory", &settings.job.memory_request)]),
        "limits": quantities([("cpu", &settings.job.cpu_limit), ("memory", &settings.job.memory_limit)]),
    });
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": workflow.metadata.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": {
            "backoffLimit": settings.job.backoff_limit,
            "activeDeadlineSeconds": settings.job.active_deadline_seconds,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": MINER_UID,
                        "runAsGroup": MINER_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": "miner",
                        "image": settings.image,
                        "imagePullPolicy": settings.image_pull_policy,
                        "args": all_args,
                        "env": env,
                        "resources": resources,
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "runAsNonRoot": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
        },
    });
    let mut job: Job = serde_json::from_value(job).expect("the block Job is a valid Job");
    if let Some(pod) = job.spec.as_mut().and_then(|spec| spec.template.spec.as_mut())
        && !settings.pull_secrets.is_empty()
    {
        let secrets = settings.pull_secrets.iter().map(|name| LocalObjectReference { name: name.clone() });
        pod.image_pull_secrets = Some(secrets.collect());
    }
    queue_job(&mut job, settings.job.queue_name.as_deref());
    job
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::workflow;

    fn settings(job: &JobSettings) -> MinerSettings<'_> {
        MinerSettings {
            image: "reg/miner:1",
            image_pull_policy: "IfNotPresent",
            pull_secrets: &[],
            threads: 2,
            job,
            otlp: None,
        }
    }

    fn job_settings() -> JobSettings {
        JobSettings {
            backoff_limit: 3,
            active_deadline_seconds: Some(600),
            cpu_request: Some("100m".into()),
            cpu_limit: None,
            memory_request: None,
            memory_limit: Some("64Mi".into()),
            queue_name: None,
        }
    }

    #[test]
    fn block_job_is_owned_by_its_workflow_and_labelled_with_workflow_and_block() {
        let js = job_settings();
        let job = build_block_job(&workflow("demo", 12, 4), 3, "ABC", 12, &settings(&js));
        // The fixture's uid is "uid-demo": its hex digits ("d", "de") fill the uid part.
        let name = job.metadata.name.clone().unwrap();
        assert!(
            name.starts_with("demo-") && name.ends_with("-b3") && name.len() == "demo-".len() + 32 + 3,
            "{name}"
        );
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("MiningWorkflow", "demo", Some(true))
        );
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[labels::WORKFLOW], "demo");
        assert_eq!(labels[labels::BLOCK], "3");
        let template = job.spec.as_ref().unwrap().template.metadata.as_ref().unwrap();
        let template_labels = template.labels.as_ref().unwrap();
        for (key, value) in labels {
            assert_eq!(template_labels.get(key), Some(value), "{key}");
        }
        // Meshes are asked not to inject into miner Pods.
        assert_eq!(template_labels["sidecar.istio.io/inject"], "false");
        assert_eq!(template.annotations.as_ref().unwrap()["linkerd.io/inject"], "disabled");
        assert!(!labels.contains_key(labels::KUEUE_QUEUE_NAME), "no queue unless configured");
        let queued_settings = JobSettings { queue_name: Some("team-a".into()), ..job_settings() };
        let queued = build_block_job(&workflow("demo", 12, 4), 3, "ABC", 12, &settings(&queued_settings));
        assert_eq!(queued.metadata.labels.as_ref().unwrap()[labels::KUEUE_QUEUE_NAME], "team-a");
        assert!(is_queued(&queued));
    }

    #[test]
    fn block_job_runs_the_miner_for_that_block_with_configured_limits() {
        let js = job_settings();
        let job = build_block_job(&workflow("demo", 12, 4), 3, "ABC", 12, &settings(&js));
        let spec = job.spec.unwrap();
        assert_eq!((spec.backoff_limit, spec.active_deadline_seconds), (Some(3), Some(600)));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.automount_service_account_token, Some(false));
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("reg/miner:1"));
        assert_eq!(
            container.args.as_deref().unwrap(),
            ["mine", "--index", "3", "--prev", "ABC", "--difficulty", "12", "--threads", "2"]
        );
        assert_eq!(container.termination_message_policy.as_deref(), Some("FallbackToLogsOnError"));
        let resources = container.resources.as_ref().unwrap();
        assert_eq!(resources.requests.as_ref().unwrap()["cpu"].0, "100m");
        assert_eq!(resources.limits.as_ref().unwrap()["memory"].0, "64Mi");
        assert!(!resources.requests.as_ref().unwrap().contains_key("memory"));
    }

    #[test]
    fn a_range_job_mines_only_its_range_and_says_so_in_annotations() {
        let js = job_settings();
        let job = build_range_job(&workflow("demo", 30, 4), 2, "ABC", 30, (1 << 27, 1 << 26), &settings(&js));
        let name = job.metadata.name.clone().unwrap();
        assert!(name.starts_with("demo-") && name.ends_with("-b2-r8000000"), "{name}");
        let annotations = job.metadata.annotations.clone().unwrap();
        assert_eq!(annotations[annotations::NONCE_START], "134217728");
        assert_eq!(annotations[annotations::NONCE_COUNT], "67108864");
        assert_eq!(job.metadata.labels.as_ref().unwrap()[labels::BLOCK], "2");
        let args = job.spec.unwrap().template.spec.unwrap().containers[0].args.clone().unwrap();
        assert_eq!(args[args.len() - 4..], ["--start", "134217728", "--count", "67108864"]);
        let whole = build_block_job(&workflow("demo", 30, 4), 2, "ABC", 30, &settings(&js));
        assert_eq!(whole.metadata.annotations, None);
    }

    #[test]
    fn block_job_runs_restricted_non_root_read_only_without_capabilities() {
        let js = job_settings();
        let job = build_block_job(&workflow("demo", 12, 4), 1, "GENESIS", 12, &settings(&js));
        let pod = job.spec.unwrap().template.spec.unwrap();
        let pod_ctx = pod.security_context.unwrap();
        assert_eq!(pod_ctx.run_as_non_root, Some(true));
        assert_eq!(pod_ctx.run_as_user, Some(65532));
        assert_eq!(pod_ctx.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let ctx = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(ctx.allow_privilege_escalation, Some(false));
        assert_eq!(ctx.read_only_root_filesystem, Some(true));
        assert_eq!(ctx.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
    }

    #[test]
    fn the_miner_gets_the_workflows_trace_and_the_collector_when_one_is_set() {
        let js = job_settings();
        let mut traced = workflow("demo", 12, 4);
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        traced.metadata.annotations =
            Some([(annotations::TRACEPARENT.to_string(), parent.to_string())].into());
        let env = |workflow: &MiningWorkflow, otlp| {
            let settings = MinerSettings { otlp, ..settings(&js) };
            let job = build_block_job(workflow, 1, "GENESIS", 12, &settings);
            let container = &job.spec.unwrap().template.spec.unwrap().containers[0];
            container
                .env
                .iter()
                .flatten()
                .map(|v| (v.name.clone(), v.value.clone().unwrap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(env(&traced, None), vec![("TRACEPARENT".to_string(), parent.to_string())]);
        let exported = env(&traced, Some(("http://collector:4318", "http/json")));
        assert_eq!(exported.len(), 3);
        assert!(exported.contains(&("OTEL_EXPORTER_OTLP_ENDPOINT".into(), "http://collector:4318".into())));
        // A claim that does not parse is no trace; the Job carries none.
        let mut garbled = traced.clone();
        garbled.metadata.annotations =
            Some([(annotations::TRACEPARENT.to_string(), "00-zz".to_string())].into());
        assert!(env(&garbled, None).is_empty());
        assert!(env(&workflow("plain", 12, 4), None).is_empty());
    }
}
