//! The node agent under the real Job controller and garbage collector.

use std::time::Duration;

use cluster_tests::{TestNamespace, create_pod, eventually, is_local_cluster, shell_image, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

fn job(name: &str, image: &str, command: Option<&[&str]>, args: &[&str], backoff_limit: i32) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {"spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
                "containers": [{
                    "name": "main", "image": image, "command": command, "args": args,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }],
            }},
        },
    }))
    .expect("a valid Job")
}

fn sleeping_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": shell_image(), "command": ["sh", "-c", "sleep 300"]}],
        },
    }))
    .expect("a valid Pod")
}

fn job_condition(job: Option<&Job>, type_: &str) -> bool {
    job.and_then(|j| j.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn is_running(pod: Option<&Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref()).and_then(|s| s.phase.as_deref()) == Some("Running")
}

async fn pods_of_job(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.expect("list pods").items
}

fn process_group_of(pod: &Pod) -> i32 {
    let id = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs[0].container_id.clone());
    id.and_then(|id| id.strip_prefix("local-process://").and_then(|p| p.parse().ok()))
        .expect("a local process id")
}

/// Whether a process of the group still runs. Zombies do not count: an
/// orphaned grandchild waits for PID 1 to reap it, but it runs no more.
fn process_group_alive(pgid: i32) -> bool {
    let entries = std::fs::read_dir("/proc").expect("a Linux /proc");
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else { return false };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
}

#[tokio::test]
async fn a_job_running_the_real_miner_completes_with_its_result_in_the_termination_message() {
    let ns = TestNamespace::new("miner-job").await;
    let jobs: Api<Job> = ns.api();
    let pods: Api<Pod> = ns.api();
    let args = ["mine", "--index", "1", "--prev", "GENESIS", "--difficulty", "16"];
    jobs.create(&PostParams::default(), &job("mine", "localhost/mining-operator/miner:dev", None, &args, 0))
        .await
        .unwrap();
    wait_for(&jobs, "mine", |j: Option<&Job>| job_condition(j, "Complete"), TIMEOUT).await;

    let pods = pods_of_job(&pods, "mine").await;
    assert_eq!(pods.len(), 1);
    let status = pods[0].status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let terminated =
        status.container_statuses.as_ref().unwrap()[0].state.as_ref().unwrap().terminated.clone().unwrap();
    assert_eq!(terminated.exit_code, 0);
    let message = terminated.message.expect("the miner's result as termination message");
    let result = mining_api::BlockResult::from_json(&message).expect("a result document");
    assert_eq!(miner::verify_result(&result, 1, "GENESIS", 16), Ok(()));
}

#[tokio::test]
async fn a_container_exiting_non_zero_fails_the_job_after_its_backoff_limit() {
    let ns = TestNamespace::new("failing-job").await;
    let jobs: Api<Job> = ns.api();
    let pods: Api<Pod> = ns.api();
    let command: &[&str] = &["sh", "-c", "echo mining went wrong >&2; exit 3"];
    jobs.create(&PostParams::default(), &job("fail", &shell_image(), Some(command), &[], 1)).await.unwrap();
    let failed =
        wait_for(&jobs, "fail", |j: Option<&Job>| job_condition(j, "Failed"), TIMEOUT).await.unwrap();
    let reason =
        failed.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Failed").unwrap().reason;
    assert_eq!(reason.as_deref(), Some("BackoffLimitExceeded"));

    let pods = pods_of_job(&pods, "fail").await;
    assert_eq!(pods.len(), 2, "the first try and one retry");
    for pod in pods {
        let status = pod.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        let terminated = status.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
        assert_eq!(terminated.exit_code, 3);
        // Nothing was written to the message file, so the log tail stands in.
        assert_eq!(terminated.message.as_deref().map(str::trim), Some("mining went wrong"));
    }
}

#[tokio::test]
async fn deleting_a_running_pod_ends_its_process() {
    let ns = TestNamespace::new("delete-pod").await;
    let pods: Api<Pod> = ns.api();
    pods.create(&PostParams::default(), &sleeping_pod("sleeper")).await.unwrap();
    let running = wait_for(&pods, "sleeper", is_running, TIMEOUT).await.unwrap();
    let pgid = is_local_cluster().then(|| process_group_of(&running));
    if let Some(pgid) = pgid {
        assert!(process_group_alive(pgid), "the container's processes run");
    }
    pods.delete("sleeper", &DeleteParams::default()).await.unwrap();
    wait_for(&pods, "sleeper", |p: Option<&Pod>| p.is_none(), TIMEOUT).await;
    if let Some(pgid) = pgid {
        assert!(!process_group_alive(pgid), "no process of the deleted pod is left");
    }
}

#[tokio::test]
async fn deleting_a_job_garbage_collects_its_pods() {
    let ns = TestNamespace::new("delete-job").await;
    let jobs: Api<Job> = ns.api();
    let pods: Api<Pod> = ns.api();
    let command: &[&str] = &["sh", "-c", "sleep 300"];
    jobs.create(&PostParams::default(), &job("sleep", &shell_image(), Some(command), &[], 0)).await.unwrap();
    let pod_name = eventually("the Job's pod to run", TIMEOUT, || async {
        pods_of_job(&pods, "sleep")
            .await
            .into_iter()
            .find(|p| is_running(Some(p)))
            .and_then(|p| p.metadata.name)
    })
    .await;

    jobs.delete("sleep", &DeleteParams::background()).await.unwrap();
    wait_for(&jobs, "sleep", |j: Option<&Job>| j.is_none(), TIMEOUT).await;
    wait_for(&pods, &pod_name, |p: Option<&Pod>| p.is_none(), TIMEOUT).await;
    assert!(pods_of_job(&pods, "sleep").await.is_empty());
}

/// A Deployment of `replicas` Pods whose container runs `script` with its
/// Pod IP in `$POD_IP`, with an httpGet readiness probe on port 8080.
fn probed_deployment(name: &str, replicas: i32, script: &str) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "automountServiceAccountToken": false, "terminationGracePeriodSeconds": 2,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
                    "containers": [{
                        "name": "web", "image": shell_image(), "command": ["sh", "-c", script],
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1, "failureThreshold": 1},
                    }],
                },
            },
        },
    }))
    .expect("a valid Deployment")
}

#[ignore = "needs the local cluster's node agent and python3; tests/run.sh runs it there"]
#[tokio::test]
async fn replicas_get_their_own_pod_ips_and_readiness_gates_the_endpoints() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    let ns = TestNamespace::new("agent-net").await;
    let deployments: Api<Deployment> = ns.api();
    let server = "exec python3 -m http.server --bind \"$POD_IP\" --directory / 8080";
    deployments.create(&PostParams::default(), &probed_deployment("web", 2, server)).await.unwrap();
    // Listens on nothing: never ready.
    deployments
        .create(&PostParams::default(), &probed_deployment("deaf", 1, "exec sleep 300"))
        .await
        .unwrap();
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
    }))
    .unwrap();
    ns.api::<Service>().create(&PostParams::default(), &service).await.unwrap();

    let available = |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref()).and_then(|s| s.available_replicas) == Some(2)
    };
    wait_for(&deployments, "web", available, TIMEOUT).await;
    let pods: Api<Pod> = ns.api();
    let web = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
    let mut ips: Vec<String> = web.iter().filter_map(|p| p.status.as_ref()?.pod_ip.clone()).collect();
    ips.sort();
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert_ne!(ips[0], ips[1], "each replica has its own address");
    // Addresses from the Node's own Pod CIDR (X.Y.0.0/16), which differs per local cluster.
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(ns.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let cidr = node.items[0].spec.as_ref().and_then(|s| s.pod_cidr.clone()).expect("the Node has a Pod CIDR");
    let prefix = cidr.split('.').take(2).collect::<Vec<_>>().join(".") + ".";
    assert!(ips.iter().all(|ip| ip.starts_with(&prefix)), "{ips:?} outside {cidr}");
    // The endpoints controller lists exactly the ready replicas, and each answers there.
    let endpoints: Api<Endpoints> = ns.api();
    let listed = eventually("the Service's endpoints", TIMEOUT, || async {
        let subsets = endpoints.get_opt("web").await.ok()??.subsets?;
        let mut addresses: Vec<String> =
            subsets.iter().flat_map(|s| s.addresses.iter().flatten().map(|a| a.ip.clone())).collect();
        addresses.sort();
        (addresses.len() == 2).then_some(addresses)
    })
    .await;
    assert_eq!(listed, ips);
    for ip in &ips {
        let mut stream = tokio::net::TcpStream::connect((ip.as_str(), 8080)).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.0 200"), "{ip}: {answer}");
    }
    // The deaf replica runs but its probe fails, so it is never Ready.
    let deaf = pods.list(&ListParams::default().labels("app=deaf")).await.unwrap().items;
    assert_eq!(deaf.len(), 1);
    let deaf_name = deaf[0].metadata.name.clone().unwrap();
    let failed_probe = |p: Option<&Pod>| {
        is_running(p)
            && p.and_then(|p| p.status.as_ref()?.conditions.clone())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "False"))
    };
    wait_for(&pods, &deaf_name, failed_probe, TIMEOUT).await;
    let deaf_deployment = deployments.get("deaf").await.unwrap();
    assert_eq!(deaf_deployment.status.and_then(|s| s.available_replicas).unwrap_or(0), 0);
}

/// A Pod running `script` in the shell image as ServiceAccount `account`,
/// with its credentials mounted.
fn in_cluster_pod(name: &str, account: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never", "serviceAccountName": account,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
            "containers": [{
                "name": "main", "image": shell_image(), "command": ["sh", "-c", script],
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }],
        },
    }))
    .expect("a valid Pod")
}

#[ignore = "needs the local cluster's node agent and kubectl; tests/run.sh runs it there"]
#[tokio::test]
async fn pods_talk_to_the_api_server_as_their_own_service_account() {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let ns = TestNamespace::new("agent-sa").await;
    for account in ["reader", "nobody"] {
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
        ns.api::<ServiceAccount>().create(&PostParams::default(), &sa).await.unwrap();
    }
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "read-pods"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}))
    .unwrap();
    ns.api::<Role>().create(&PostParams::default(), &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({"metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns.name}]}))
    .unwrap();
    ns.api::<RoleBinding>().create(&PostParams::default(), &binding).await.unwrap();
    // The authorizer reads RBAC from its own cache: wait until it has the
    // binding, so a slow cache cannot pass for a broken token.
    let reviews: Api<SubjectAccessReview> = Api::all(ns.client.clone());
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": format!("system:serviceaccount:{}:reader", ns.name),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{}", ns.name)],
        "resourceAttributes": {"namespace": ns.name, "verb": "list", "resource": "pods"},
    }}))
    .unwrap();
    eventually("the authorizer to see the RoleBinding", TIMEOUT, || async {
        let answer = reviews.create(&PostParams::default(), &review).await.expect("a SubjectAccessReview");
        answer.status.is_some_and(|s| s.allowed).then_some(())
    })
    .await;

    // What every client library's in-cluster config reads: the service
    // variables and the mounted token, CA and namespace. (Python's standard
    // library rather than kubectl: the host's kubectl may be a wrapper with
    // needs of its own.)
    let script = r#"test "$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)" = "$NS" && python3 - <<'PY'
import json, os, ssl, sys, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(f"{sa}/token").read()
url = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/api/v1/namespaces/{os.environ['NS']}/pods"
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
try:
    answer = urllib.request.urlopen(request, context=ssl.create_default_context(cafile=f"{sa}/ca.crt"), timeout=20)
    print(len(json.load(answer)["items"]), "pods")
except urllib.error.HTTPError as error:
    sys.exit(json.load(error)["message"])
PY"#;
    let pods: Api<Pod> = ns.api();
    for (name, account) in [("allowed", "reader"), ("denied", "nobody")] {
        let mut pod = in_cluster_pod(name, account, script);
        pod.spec.as_mut().unwrap().containers[0].env =
            Some(vec![serde_json::from_value(json!({"name": "NS", "value": ns.name})).unwrap()]);
        // The accounts are new: on 1.20 their token Secrets may not exist yet.
        create_pod(&pods, &pod, TIMEOUT).await;
    }
    let finished = |p: Option<&Pod>| {
        matches!(p.and_then(|p| p.status.as_ref()?.phase.as_deref()), Some("Succeeded" | "Failed"))
    };
    let allowed = wait_for(&pods, "allowed", finished, TIMEOUT).await.expect("the pod");
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    assert_eq!(phase(&allowed), "Succeeded", "{:#?}", allowed.status);
    let denied = wait_for(&pods, "denied", finished, TIMEOUT).await.expect("the pod");
    assert_eq!(phase(&denied), "Failed");
    let message = denied
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().next())
        .and_then(|c| c.state?.terminated?.message)
        .unwrap_or_default();
    assert!(
        message.contains(&format!("system:serviceaccount:{}:nobody", ns.name))
            && message.contains("forbidden"),
        "the missing RBAC rule should be what stops it: {message}"
    );
}
