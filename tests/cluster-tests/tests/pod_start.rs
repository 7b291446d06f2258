//! Work whose Pods cannot start never hangs: for each cause a current
//! cluster meets — admission that refuses the Pod (a denying webhook,
//! standing in for Pod Security), a used-up ResourceQuota, an image that
//! does not exist, a private image without its pull secret, a missing
//! Secret key, a Pod no node takes, an image name that does not parse — a
//! tool run and (where the miner's Pod can meet the cause) a workflow's
//! block say why to their caller (the MCP answer, `kubectl mining show`)
//! within seconds of the cluster showing it, and end `failed` at once when
//! the cause cannot clear, or after the operator's bound when it can. The
//! causes are real: the API server's admission and quota, the Job
//! controller, a private registry (TLS, htpasswd), and the node agent
//! pulling from it and reporting what a kubelet reports
//! (tests/node-agent/src/pull.rs). Needs the local cluster's node agent.

use std::time::{Duration, Instant};

use cluster_tests::mcp::{FrontendProcess, Sdk, release_binary};
use cluster_tests::tools::{ALICE, call, define, setup_with, tool};
use cluster_tests::webhook::{Admission, create_rule};
use cluster_tests::{OperatorProcess, TestNamespace, eventually, kubectl_with_input};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use mining_api::{MiningWorkflow, ToolRun, ToolRunPhase, WorkflowPhase};
use serde_json::{Value, json};

/// The operator's bound on causes that may clear, in these tests.
const BOUND_SECONDS: u64 = 20;
/// How soon after the cluster shows a cause the caller must read it.
const REPORTED_WITHIN: Duration = Duration::from_secs(10);

struct Case {
    ns: TestNamespace,
    operator: OperatorProcess,
    frontend: FrontendProcess,
}

impl Case {
    async fn start(name: &str, operator_args: &[&str]) -> Self {
        let bound = BOUND_SECONDS.to_string();
        let mut args = vec!["--pod-start-timeout-seconds", bound.as_str()];
        args.extend_from_slice(operator_args);
        let (ns, operator, frontend) = setup_with(name, &args).await;
        Case { ns, operator, frontend }
    }

    /// Calls a tool like `sum-numbers` whose Job template is changed by
    /// `pod` (merged into its Pod spec), answered `running` at once; the run's id.
    async fn call_tool(&self, name: &str, pod: Value) -> String {
        let mut defined = tool(name, 0, json!({}));
        let template = defined.spec.job_template.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        let mut merged = serde_json::to_value(&*template).unwrap();
        merge(&mut merged, pod);
        *template = serde_json::from_value(merged).unwrap();
        define(&self.ns, &self.frontend.url(), defined).await;
        let answer =
            call(Sdk::TypeScript, &self.frontend.url(), ALICE, name, json!({"numbers": [1, 2]})).await;
        assert_eq!(answer["status"], "running", "{answer:#}");
        answer["workflow_id"].as_str().unwrap().to_string()
    }

    /// Starts one block through `start_mining`; the workflow's id.
    async fn start_block(&self) -> String {
        let arguments = json!({"difficulty": 4, "blocks": 1, "wait_seconds": 0});
        let answer = call(Sdk::Python, &self.frontend.url(), ALICE, "start_mining", arguments).await;
        assert_eq!(answer["status"], "running", "{answer:#}");
        answer["workflow_id"].as_str().unwrap().to_string()
    }

    /// Waits until the run says `words`, and checks that its caller reads
    /// them too (`get_tool_result`) and `kubectl mining show` prints them.
    async fn run_says(&self, id: &str, words: &str, within: Duration) -> ToolRun {
        let runs: Api<ToolRun> = self.ns.api();
        let run = eventually(&format!("run {id} to say {words:?}"), within, || async {
            let run = runs.get(id).await.ok()?;
            run.status.as_ref()?.message.as_deref()?.contains(words).then_some(run)
        })
        .await;
        let answer =
            call(Sdk::TypeScript, &self.frontend.url(), ALICE, "get_tool_result", json!({"workflow_id": id}))
                .await;
        assert!(answer.to_string().contains(words), "the caller reads {words:?}: {answer:#}");
        self.shown(id, words);
        run
    }

    async fn workflow_says(&self, id: &str, words: &str, within: Duration) -> MiningWorkflow {
        let workflows: Api<MiningWorkflow> = self.ns.api();
        // `status.message` is a short column; its conditions say it whole.
        let workflow = eventually(&format!("workflow {id} to say {words:?}"), within, || async {
            let workflow = workflows.get(id).await.ok()?;
            let status = workflow.status.as_ref()?;
            let said = status.message.iter().chain(status.conditions.iter().map(|c| &c.message));
            said.into_iter().any(|m| m.contains(words)).then_some(workflow)
        })
        .await;
        let answer =
            call(Sdk::Python, &self.frontend.url(), ALICE, "get_mining_result", json!({"workflow_id": id}))
                .await;
        assert!(answer.to_string().contains(words), "the caller reads {words:?}: {answer:#}");
        self.shown(id, words);
        workflow
    }

    /// `kubectl mining show ID` prints `words`.
    fn shown(&self, id: &str, words: &str) {
        let output = std::process::Command::new(release_binary("kubectl-mining"))
            .args(["show", id, "-n", &self.ns.name])
            .output()
            .expect("kubectl-mining runs");
        let printed = String::from_utf8_lossy(&output.stdout);
        assert!(printed.contains(words), "kubectl mining show {id} prints {words:?}: {printed}");
    }

    async fn run_ends(&self, id: &str, phase: ToolRunPhase, within: Duration) -> ToolRun {
        let runs: Api<ToolRun> = self.ns.api();
        eventually(&format!("run {id} to end {phase:?}"), within, || async {
            let run = runs.get(id).await.ok()?;
            (run.phase() == phase).then_some(run)
        })
        .await
    }

    async fn workflow_ends(&self, id: &str, phase: WorkflowPhase, within: Duration) -> MiningWorkflow {
        let workflows: Api<MiningWorkflow> = self.ns.api();
        eventually(&format!("workflow {id} to end {phase:?}"), within, || async {
            let workflow = workflows.get(id).await.ok()?;
            (workflow.phase() == phase).then_some(workflow)
        })
        .await
    }

    /// The run's (or block's) Jobs are gone or going: no slot is kept.
    async fn jobs_left(&self) -> usize {
        let jobs: Api<Job> = self.ns.api();
        let listed = jobs.list(&ListParams::default()).await.unwrap().items;
        listed.iter().filter(|job| job.metadata.deletion_timestamp.is_none()).count()
    }
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from,
    }
}

/// A cause that cannot clear: failed at once, its Jobs deleted.
async fn fails_at_once_run(case: &Case, id: &str, words: &str) {
    let run = case.run_ends(id, ToolRunPhase::Failed, REPORTED_WITHIN + Duration::from_secs(5)).await;
    let message = run.status.unwrap().message.unwrap();
    assert!(message.contains("CannotStart") && message.contains(words), "{message}");
}

#[tokio::test]
#[ignore = "needs the local cluster's node agent"]
async fn refused_by_admission_a_run_and_a_block_fail_at_once_with_the_clusters_words() {
    let case = Case::start("start-refused", &[]).await;
    let _webhook = cluster_tests::webhook::start(
        &case.ns,
        "deny_pods.py",
        "deny-pods.mining.test",
        Admission::Validating,
        vec![create_rule("", "pods")],
    )
    .await;
    let words = "this namespace admits no Pods";
    let id = case.call_tool("refused", json!({})).await;
    fails_at_once_run(&case, &id, words).await;
    case.run_says(&id, words, Duration::from_secs(1)).await;
    let id = case.start_block().await;
    let workflow = case.workflow_ends(&id, WorkflowPhase::Failed, Duration::from_secs(20)).await;
    let ready = workflow.condition(mining_api::condition_types::READY).unwrap();
    assert_eq!(ready.reason, "CannotStart", "{ready:?}");
    assert!(ready.message.contains(words), "{ready:?}");
    case.workflow_says(&id, words, Duration::from_secs(1)).await;
    eventually("the refused Jobs to go", Duration::from_secs(20), || async {
        (case.jobs_left().await == 0).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local cluster's node agent"]
async fn a_used_up_quota_is_waited_for_within_the_bound_then_fails() {
    let case = Case::start("start-quota", &[]).await;
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
                       "spec": {"hard": {"pods": "0"}}});
    let made = kubectl_with_input(&["apply", "-n", &case.ns.name, "-f", "-"], &quota.to_string());
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // Enforced once the quota controller has counted what is used.
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = case.ns.api();
    eventually("the quota to be counted", Duration::from_secs(20), || async {
        quotas.get("no-pods").await.ok()?.status?.used.map(|_| ())
    })
    .await;
    let started = Instant::now();
    let run = case.call_tool("quota", json!({})).await;
    let block = case.start_block().await;
    let words = "waiting for room in the namespace's ResourceQuota";
    let seen = case.run_says(&run, words, REPORTED_WITHIN + Duration::from_secs(5)).await;
    assert_eq!(seen.phase(), ToolRunPhase::Running, "it keeps its slot while the quota may clear");
    assert!(seen.status.unwrap().message.unwrap().contains("exceeded quota"), "the API server's words");
    let seen = case.workflow_says(&block, words, REPORTED_WITHIN + Duration::from_secs(5)).await;
    assert_eq!(seen.phase(), WorkflowPhase::Mining);
    let bound = Duration::from_secs(BOUND_SECONDS + 15);
    let ended = case.run_ends(&run, ToolRunPhase::Failed, bound).await;
    // (Creation times are whole seconds: the bound may end up to 1 s early.)
    assert!(started.elapsed() >= Duration::from_secs(BOUND_SECONDS - 1), "not before the bound");
    assert!(ended.status.unwrap().message.unwrap().contains("StartTimedOut"));
    let ended = case.workflow_ends(&block, WorkflowPhase::Failed, bound).await;
    assert_eq!(ended.condition(mining_api::condition_types::READY).unwrap().reason, "StartTimedOut");
    assert!(
        case.operator
            .metric("mining_operator_start_failures_total{kind=\"tool run\",reason=\"StartTimedOut\"}")
            .await
            >= 1.0
    );
}

#[tokio::test]
#[ignore = "needs the local cluster's node agent"]
async fn an_image_that_does_not_exist_is_pulled_until_the_bound_then_fails() {
    let case = Case::start("start-no-image", &["--miner-image", "mining-operator/no-such-miner:dev"]).await;
    let run = case
        .call_tool(
            "no-image",
            json!({"containers": [{"name": "tool", "image": "mining-operator/no-such-tool:dev"}]}),
        )
        .await;
    let block = case.start_block().await;
    let words = "waiting for its image to be pulled";
    let seen = case.run_says(&run, words, REPORTED_WITHIN + Duration::from_secs(5)).await;
    assert!(seen.status.unwrap().message.unwrap().contains("mining-operator/no-such-tool:dev"));
    case.workflow_says(&block, words, REPORTED_WITHIN + Duration::from_secs(5)).await;
    let bound = Duration::from_secs(BOUND_SECONDS + 15);
    let ended = case.run_ends(&run, ToolRunPhase::Failed, bound).await;
    assert!(ended.status.unwrap().message.unwrap().contains("StartTimedOut"));
    let ended = case.workflow_ends(&block, WorkflowPhase::Failed, bound).await;
    assert_eq!(ended.condition(mining_api::condition_types::READY).unwrap().reason, "StartTimedOut");
}

#[tokio::test]
#[ignore = "needs the local cluster's node agent"]
async fn a_private_image_waits_for_its_pull_secret_and_then_runs() {
    // The images under a path the node never pulled: it must, with a secret.
    let registry = cluster_tests::registry::Registry::local();
    let path = cluster_tests::registry::Registry::unique_path("start-private");
    let miner = registry.push("localhost/mining-operator/miner:dev", &path);
    let image = registry.push(cluster_tests::tools::IMAGE, &path);
    assert!(!cluster_tests::registry::Registry::node_holds(&image), "the node has not pulled {image}");
    let case =
        Case::start("start-private", &["--miner-image", &miner, "--miner-image-pull-secret", "regcred"])
            .await;
    let pod =
        json!({"imagePullSecrets": [{"name": "regcred"}], "containers": [{"name": "tool", "image": image}]});
    let run = case.call_tool("private", pod).await;
    let block = case.start_block().await;
    // The registry refused the pull without credentials, then the node
    // backs off: the caller reads which image waits, in the registry's words.
    let words = "waiting for its image to be pulled";
    let seen = case.run_says(&run, words, REPORTED_WITHIN + Duration::from_secs(5)).await;
    let message = seen.status.unwrap().message.unwrap();
    assert!(message.contains(&registry.host), "{message}");
    case.workflow_says(&block, words, REPORTED_WITHIN + Duration::from_secs(5)).await;
    let jobs: Api<Job> = case.ns.api();
    let listed = jobs.list(&ListParams::default()).await.unwrap().items;
    let pulls_with = |job: &Job| {
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        pod.image_pull_secrets.iter().flatten().map(|s| s.name.clone()).collect::<Vec<_>>()
    };
    assert!(listed.iter().all(|job| pulls_with(job) == ["regcred"]), "every Job pulls with the secret");
    let pods: Api<Pod> = case.ns.api();
    let refused = pods.list(&ListParams::default()).await.unwrap().items.into_iter().any(|pod| {
        let statuses = pod.status.and_then(|s| s.container_statuses).unwrap_or_default();
        statuses.iter().filter_map(|s| s.state.as_ref()?.waiting.as_ref()?.message.clone()).any(|m| {
            m.contains("authentication required")
                || m.contains("unauthorized")
                || m.contains("Back-off pulling")
        })
    });
    assert!(refused, "a Pod waits on the registry's refusal");
    // The registry's credentials, as `kubectl create secret docker-registry` makes them.
    registry.create_pull_secret(&case.ns.name, "regcred");
    let ended = case.run_ends(&run, ToolRunPhase::Succeeded, Duration::from_secs(60)).await;
    assert_eq!(
        ended.status.unwrap().result.as_deref().map(serde_json::from_str::<Value>).unwrap().unwrap()["sum"],
        3.0
    );
    case.workflow_ends(&block, WorkflowPhase::Succeeded, Duration::from_secs(60)).await;
    // Both ran what the node pulled from the registry with the secret.
    assert!(cluster_tests::registry::Registry::node_holds(&image), "the node pulled {image}");
    assert!(cluster_tests::registry::Registry::node_holds(&miner), "the node pulled {miner}");
}

#[tokio::test]
#[ignore = "needs the local cluster's node agent"]
async fn a_missing_secret_key_and_an_invalid_image_name_fail_at_once() {
    let case = Case::start("start-config", &["--miner-image", "Mining-Operator/Miner:dev"]).await;
    let env = json!([{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}]);
    let run = case
        .call_tool(
            "no-secret",
            json!({"containers": [{"name": "tool", "image": cluster_tests::tools::IMAGE, "env": env}]}),
        )
        .await;
    fails_at_once_run(&case, &run, "absent").await;
    case.run_says(&run, "needs a Secret, ConfigMap or key that does not exist", Duration::from_secs(1)).await;
    let invalid = case
        .call_tool("invalid-image", json!({"containers": [{"name": "tool", "image": "Not/A Valid:Image"}]}))
        .await;
    fails_at_once_run(&case, &invalid, "InvalidImageName").await;
    let block = case.start_block().await;
    let workflow = case.workflow_ends(&block, WorkflowPhase::Failed, Duration::from_secs(20)).await;
    let ready = workflow.condition(mining_api::condition_types::READY).unwrap();
    assert_eq!(ready.reason, "CannotStart", "{ready:?}");
    assert!(ready.message.contains("its image name is not valid"), "{ready:?}");
}

#[tokio::test]
#[ignore = "needs the local cluster's node agent"]
async fn a_pod_no_node_takes_waits_within_the_bound_then_fails() {
    let case = Case::start("start-no-node", &[]).await;
    let run = case.call_tool("no-node", json!({"nodeSelector": {"pool": "gpu-that-does-not-exist"}})).await;
    let seen = case
        .run_says(&run, "waiting for a node that can take its Pod", REPORTED_WITHIN + Duration::from_secs(5))
        .await;
    assert!(seen.status.unwrap().message.unwrap().contains("didn't match Pod's node affinity/selector"));
    let ended = case.run_ends(&run, ToolRunPhase::Failed, Duration::from_secs(BOUND_SECONDS + 15)).await;
    assert!(ended.status.unwrap().message.unwrap().contains("StartTimedOut"));
}

/// Events and planted Pods are claims: whoever may create Events and Pods
/// in the namespace (not the Pods' status, which the node writes) can make
/// the operator look again, never fail or delay another caller's run.
#[tokio::test]
#[ignore = "needs the local cluster's node agent"]
async fn forged_events_and_planted_pods_fail_no_ones_run() {
    let case = Case::start("start-forged", &[]).await;
    let mut defined = tool("victim", 0, json!({}));
    defined.spec.job_template.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image =
        Some(cluster_tests::tools::IMAGE.into());
    define(&case.ns, &case.frontend.url(), defined).await;
    let answer = call(
        Sdk::TypeScript,
        &case.frontend.url(),
        ALICE,
        "victim",
        json!({"numbers": [20, 22], "delay_seconds": 8}),
    )
    .await;
    let id = answer["workflow_id"].as_str().unwrap().to_string();
    let jobs: Api<Job> = case.ns.api();
    let job = eventually("the victim's Job", Duration::from_secs(20), || async {
        jobs.list(&ListParams::default()).await.ok()?.items.into_iter().next()
    })
    .await;
    let (job_name, job_uid) = (job.metadata.name.clone().unwrap(), job.metadata.uid.clone().unwrap());
    // The attacker: may create Events and Pods here, nothing else of ours.
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "attacker"},
         "rules": [{"apiGroups": [""], "resources": ["events", "pods"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "attacker"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "attacker"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "attacker"}]}]});
    let made = kubectl_with_input(&["apply", "-n", &case.ns.name, "-f", "-"], &rbac.to_string());
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let as_attacker = |args: &[&str], input: &str| {
        let mut all = vec!["--as", "attacker", "-n", case.ns.name.as_str()];
        all.extend_from_slice(args);
        kubectl_with_input(&all, input)
    };
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": format!("{job_name}.forged")},
        "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid, "namespace": case.ns.name},
        "reason": "FailedCreate", "type": "Warning", "source": {"component": "job-controller"},
        "message": "Error creating: pods is forbidden: violates PodSecurity \"restricted:latest\""});
    let made = as_attacker(&["create", "-f", "-"], &event.to_string());
    assert!(
        made.status.success(),
        "the attacker may create Events: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    // A Pod claiming the Job (its name label and controller reference; not
    // its selector, or the Job controller deletes it as one Pod too many)
    // that cannot start: an image name that does not parse.
    let planted = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{job_name}-planted"), "labels": {"job-name": job_name},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid, "controller": true}]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "tool", "image": "Not/Valid"}]}});
    let made = as_attacker(&["create", "-f", "-"], &planted.to_string());
    assert!(made.status.success(), "the attacker may create Pods: {}", String::from_utf8_lossy(&made.stderr));
    let pods: Api<Pod> = case.ns.api();
    eventually("the planted Pod to show InvalidImageName", Duration::from_secs(20), || async {
        let pod = pods.get(&format!("{job_name}-planted")).await.ok()?;
        let waiting = pod.status?.container_statuses?.first()?.state.clone()?.waiting?;
        (waiting.reason.as_deref() == Some("InvalidImageName")).then_some(())
    })
    .await;
    let ended = case.run_ends(&id, ToolRunPhase::Succeeded, Duration::from_secs(60)).await;
    let status = ended.status.unwrap();
    assert_eq!(serde_json::from_str::<Value>(status.result.as_deref().unwrap()).unwrap()["sum"], 42.0);
    let answer =
        call(Sdk::TypeScript, &case.frontend.url(), ALICE, "get_tool_result", json!({"workflow_id": id}))
            .await;
    assert_eq!(answer["status"], "completed", "{answer:#}");
}
