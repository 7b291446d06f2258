//! Whether a Job is one this operator built for a block (pure).
//!
//! Anyone who may create Jobs or Pods in a namespace can copy a block Job's
//! labels, and even an ownerReference (uids are readable). What they cannot
//! do is make the copy run anything but the operator's miner: so a Job is
//! ours only when its Pod template runs exactly what `job.rs` builds, and a
//! Pod's result is read only when the Job controls it and it runs exactly
//! its Job's template ([`mining_api::provenance`], shared by every kind). A
//! copy that passes both checks computes the honest answer, which the
//! operator verifies anyway.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec};

/// How a stored Job differs from the one the operator builds for its block
/// (`None`: it is the operator's): in what its Pod runs, and in every field
/// that changes when or whether it runs (a planted suspended Job with the
/// right template would otherwise be adopted and hold a slot forever).
pub fn job_mismatch(job: &Job, built: &Job) -> Option<String> {
    let (Some(stored), Some(expected)) = (template_spec(job), template_spec(built)) else {
        return Some("it has no Pod template".into());
    };
    let (Some(stored_job), Some(expected_job)) = (job.spec.as_ref(), built.spec.as_ref()) else {
        return Some("it has no spec".into());
    };
    // Put in a queue controller's queue (Kueue): it suspends the Job until
    // admitted and sets the admitted flavor's node selector, affinity and
    // tolerations; neither changes what the miner computes.
    let queued = crate::mining::job::is_queued(built);
    job_spec_mismatch(stored_job, expected_job, queued)
        .or_else(|| scheduling_mismatch(stored, expected, queued))
        .or_else(|| pod_spec_mismatch(stored, expected))
}

/// The Job-level fields that decide whether, how often and how long its Pods
/// run, with the API server's defaults for the ones the operator leaves unset.
fn job_spec_mismatch(stored: &JobSpec, expected: &JobSpec, queued: bool) -> Option<String> {
    let differs = |what: &str| Some(format!("its {what} differs"));
    if !queued && stored.suspend.unwrap_or(false) != expected.suspend.unwrap_or(false) {
        return Some("it is suspended".into());
    }
    // The API server's defaults (batch/v1): backoffLimit 6, completions and parallelism 1.
    if stored.backoff_limit.unwrap_or(6) != expected.backoff_limit.unwrap_or(6) {
        return differs("backoffLimit");
    }
    if stored.active_deadline_seconds != expected.active_deadline_seconds {
        return differs("activeDeadlineSeconds");
    }
    if stored.completions.unwrap_or(1) != expected.completions.unwrap_or(1) {
        return differs("completions");
    }
    if stored.parallelism.unwrap_or(1) != expected.parallelism.unwrap_or(1) {
        return differs("parallelism");
    }
    if stored.ttl_seconds_after_finished != expected.ttl_seconds_after_finished {
        return differs("ttlSecondsAfterFinished");
    }
    let mode = |s: &JobSpec| s.completion_mode.clone().unwrap_or_else(|| "NonIndexed".into());
    if mode(stored) != mode(expected) {
        return differs("completionMode");
    }
    None
}

/// What decides where and whether a Job's Pods are scheduled: compared for
/// Job templates only (a scheduled Pod has a node name the template has not).
fn scheduling_mismatch(stored: &PodSpec, expected: &PodSpec, queued: bool) -> Option<String> {
    let differs = |what: &str| Some(format!("its Pod {what} differs"));
    let empty_as_none = |m: &Option<BTreeMap<String, String>>| m.clone().filter(|m| !m.is_empty());
    if stored.node_name != expected.node_name {
        return differs("node name");
    }
    let tolerations = |s: &PodSpec| s.tolerations.clone().unwrap_or_default();
    if !queued {
        if empty_as_none(&stored.node_selector) != empty_as_none(&expected.node_selector) {
            return differs("node selector");
        }
        if stored.affinity != expected.affinity {
            return differs("affinity");
        }
        if tolerations(stored) != tolerations(expected) {
            return differs("tolerations");
        }
    }
    if stored.scheduling_gates.as_ref().is_some_and(|g| !g.is_empty()) {
        return Some("its Pods are gated from scheduling".into());
    }
    if stored.priority_class_name != expected.priority_class_name
        || stored.runtime_class_name != expected.runtime_class_name
    {
        return differs("priority or runtime class");
    }
    if stored.active_deadline_seconds != expected.active_deadline_seconds {
        return differs("activeDeadlineSeconds");
    }
    let resources = |s: &PodSpec| s.containers.iter().map(resource_values).collect::<Vec<_>>();
    if resources(stored) != resources(expected) {
        return differs("resources");
    }
    None
}

/// A container's requests and limits by value (`0.5` and `500m` are equal).
fn resource_values(container: &Container) -> Vec<(bool, String, Option<u128>)> {
    let Some(resources) = container.resources.as_ref() else { return vec![] };
    [(false, &resources.requests), (true, &resources.limits)]
        .into_iter()
        .flat_map(|(limit, map)| {
            map.iter().flatten().map(move |(k, q)| (limit, k.clone(), quantity_micros(&q.0)))
        })
        .collect()
}

/// A Kubernetes quantity in millionths of its unit (`None` when it is not one):
/// enough precision for CPU millis and memory bytes, saturating above.
fn quantity_micros(text: &str) -> Option<u128> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.len() > 6 {
        return None;
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let fraction: u128 = format!("{fraction:0<6}").parse().ok()?;
    let micros = whole.checked_mul(1_000_000)?.checked_add(fraction)?;
    let (multiplier, divisor): (u128, u128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        _ => return None,
    };
    Some(micros.saturating_mul(multiplier) / divisor)
}

fn template_spec(job: &Job) -> Option<&PodSpec> {
    job.spec.as_ref()?.template.spec.as_ref()
}

/// The first difference that could change what a Pod prints, between a
/// stored Job's Pod template (with the API server's defaults) and the one
/// built. Fields the API server defaults are compared only where the built
/// spec sets them.
fn pod_spec_mismatch(stored: &PodSpec, expected: &PodSpec) -> Option<String> {
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
    // Only the trace context and where to report it, as plain values: the
    // miner reads nothing else from its environment, and these change no
    // result. Their values are not compared, so an edit of a workflow's
    // traceparent annotation cannot make its own Job look foreign.
    let traced_only = got.env.iter().flatten().all(|var| {
        crate::mining::job::MINER_ENV_NAMES.contains(&var.name.as_str()) && var.value_from.is_none()
    });
    if !traced_only || got.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
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
    use k8s_openapi::api::core::v1::{EnvVar, Pod};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use mining_api::provenance::controlled_by;
    use mining_api::{MiningWorkflow, Work};

    use super::*;
    use crate::testing::built_block_job;

    /// The check every reader of a block's Pods makes.
    fn pod_mismatch(pod: &Pod, job: &Job) -> Option<String> {
        mining_api::provenance::pod_mismatch(pod, job, MiningWorkflow::READS)
    }

    fn built() -> Job {
        built_block_job()
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
        let cases: [(&str, Forgery); 8] = [
            ("image", |s| s.containers[0].image = Some("evil:1".into())),
            ("command", |s| s.containers[0].command = Some(vec!["/bin/sh".into(), "-c".into()])),
            ("arguments", |s| s.containers[0].args = Some(vec!["echo".into(), "{}".into()])),
            ("environment", |s| {
                s.containers[0].env = Some(vec![EnvVar { name: "X".into(), ..Default::default() }])
            }),
            ("containers", |s| s.containers.push(s.containers[0].clone())),
            ("privileged init container", |s| {
                let mut init = s.containers[0].clone();
                init.name = "setup".into();
                init.security_context.get_or_insert_default().privileged = Some(true);
                s.init_containers = Some(vec![init]);
            }),
            ("shared process namespace", |s| {
                s.containers.push(Container { name: "sidecar".into(), ..Default::default() });
                s.share_process_namespace = Some(true);
            }),
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
    fn a_mesh_s_sidecar_and_init_container_leave_a_pod_the_jobs_but_not_a_job_template() {
        let job = built();
        let mut pod = pod_of(&job, "job-uid");
        mining_api::testing::inject_mesh(pod.spec.as_mut().unwrap());
        pod.metadata.labels = Some([("security.istio.io/tlsMode".into(), "istio".into())].into());
        assert_eq!(pod_mismatch(&pod, &job), None, "admission's additions reach nothing of the miner's");
        // The miner itself changed by admission is still not the Job's.
        let mut changed = pod.clone();
        changed.spec.as_mut().unwrap().containers[0].args = Some(vec!["--forged".into()]);
        assert!(pod_mismatch(&changed, &job).is_some());
        // A Job is built by the operator alone: one whose template carries
        // more than it builds is not the operator's.
        let mut planted = built();
        mining_api::testing::inject_mesh(planted.spec.as_mut().unwrap().template.spec.as_mut().unwrap());
        assert!(job_mismatch(&planted, &built()).is_some());
    }

    #[test]
    fn trace_context_in_a_jobs_environment_is_read_by_name_and_nothing_else_passes() {
        use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};
        let with_env = |env: Vec<EnvVar>| {
            let mut job = built();
            job.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].env = Some(env);
            job
        };
        let plain = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        };
        // Another trace, another collector (the workflow's traceparent
        // annotation edited since): the result cannot differ, so the Job is
        // still the operator's.
        let traced = with_env(vec![
            plain("TRACEPARENT", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            plain("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4318"),
        ]);
        assert_eq!(job_mismatch(&traced, &built()), None);
        // Its Pods run exactly its template, values included.
        assert_eq!(pod_mismatch(&pod_of(&traced, "job-uid"), &traced), None);
        assert!(pod_mismatch(&pod_of(&built(), "job-uid"), &traced).is_some(), "another Job's trace");
        for forged in [
            vec![plain("LD_PRELOAD", "/tmp/evil.so")],
            vec![plain("TRACEPARENT", "x"), plain("RUST_MIN_STACK", "1")],
            vec![EnvVar {
                name: "TRACEPARENT".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        ] {
            assert!(job_mismatch(&with_env(forged.clone()), &built()).is_some(), "{forged:?} passed");
        }
    }

    #[test]
    fn a_planted_job_that_would_run_later_or_differently_is_never_adopted() {
        type Plant = fn(&mut JobSpec);
        let cases: [(&str, Plant); 10] = [
            ("suspended", |s| s.suspend = Some(true)),
            ("backoffLimit", |s| s.backoff_limit = Some(0)),
            ("activeDeadlineSeconds", |s| s.active_deadline_seconds = Some(1)),
            ("completions", |s| s.completions = Some(0)),
            ("parallelism", |s| s.parallelism = Some(0)),
            ("ttlSecondsAfterFinished", |s| s.ttl_seconds_after_finished = Some(0)),
            ("node name", |s| s.template.spec.as_mut().unwrap().node_name = Some("nowhere".into())),
            ("node selector", |s| {
                s.template.spec.as_mut().unwrap().node_selector = Some([("x".into(), "y".into())].into())
            }),
            ("priority class", |s| {
                s.template.spec.as_mut().unwrap().priority_class_name = Some("low".into())
            }),
            ("resources", |s| {
                let container = &mut s.template.spec.as_mut().unwrap().containers[0];
                container.resources.get_or_insert_default().requests =
                    Some([("cpu".into(), Quantity("64".into()))].into())
            }),
        ];
        for (what, plant) in cases {
            let mut planted = built();
            plant(planted.spec.as_mut().unwrap());
            assert!(job_mismatch(&planted, &built()).is_some(), "a Job with another {what} was adopted");
        }
    }

    #[test]
    fn a_job_in_a_queue_controllers_queue_may_wait_suspended_and_be_placed_but_runs_nothing_else() {
        let mut queued = built();
        crate::mining::job::queue_job(&mut queued, Some("team-a"));
        let mut held = queued.clone();
        held.spec.as_mut().unwrap().suspend = Some(true);
        assert_eq!(job_mismatch(&held, &queued), None, "suspended until the queue admits it");
        let mut placed = queued.clone();
        let pod = placed.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        pod.node_selector = Some([("cloud.example.com/flavor".into(), "spot".into())].into());
        pod.tolerations = Some(vec![
            serde_json::from_value(serde_json::json!({"key": "spot", "operator": "Exists"})).unwrap(),
        ]);
        assert_eq!(job_mismatch(&placed, &queued), None, "placed on the flavor it was admitted to");
        let mut forged = held.clone();
        forged.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image =
            Some("evil:1".into());
        assert!(job_mismatch(&forged, &queued).is_some(), "a queued Job still runs only the miner");
        // Without the operator's queue, a suspended Job is still not its own.
        assert!(job_mismatch(&held, &built()).is_some());
    }

    #[test]
    fn quantities_compare_by_value() {
        assert_eq!(quantity_micros("0.5"), quantity_micros("500m"));
        assert_eq!(quantity_micros("1Ki"), quantity_micros("1024"));
        assert_eq!(quantity_micros("1k"), Some(1_000_000_000));
        assert_ne!(quantity_micros("100m"), quantity_micros("1"));
        for garbage in ["", ".", "1x", "1.0000001", "--1"] {
            assert_eq!(quantity_micros(garbage), None, "{garbage}");
        }
        assert!(quantity_micros(&"9".repeat(60)).is_none(), "an overflow is not a value");
    }

    #[test]
    fn defaults_the_api_server_adds_do_not_make_a_job_foreign() {
        let mut stored = built();
        let spec = stored.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        spec.dns_policy = Some("ClusterFirst".into());
        spec.scheduler_name = Some("default-scheduler".into());
        spec.termination_grace_period_seconds = Some(30);
        spec.containers[0].termination_message_policy = Some("FallbackToLogsOnError".into());
        let job_spec = stored.spec.as_mut().unwrap();
        job_spec.completions = Some(1);
        job_spec.parallelism = Some(1);
        job_spec.suspend = Some(false);
        job_spec.completion_mode = Some("NonIndexed".into());
        assert_eq!(job_mismatch(&stored, &built()), None);
    }
}
