//! The local node agent runs Pods from the images `make images` built, as a
//! kubelet would: confined as the Pod's securityContext says, and a missing
//! image waits as a kubelet says it (`ErrImagePull`, `ImagePullBackOff`,
//! `ErrImageNeverPull`, `InvalidImageName`), never a host binary standing in.

use std::time::Duration;

use cluster_tests::{TestNamespace, create_pod, eventually, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

/// A container mining long enough to be looked at, from the miner image.
fn miner_container(name: &str, security: serde_json::Value) -> serde_json::Value {
    json!({"name": name, "image": "localhost/mining-operator/miner:dev",
           "args": ["chain", "--blocks", "1000", "--difficulty", "40"], "securityContext": security})
}

fn pid_of(pod: &Pod, container: &str) -> u32 {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).expect("statuses");
    let status = statuses.iter().find(|s| s.name == container).expect("the container's status");
    let id = status.container_id.as_deref().expect("a container id");
    id.strip_prefix("local-process://").and_then(|pid| pid.parse().ok()).expect("a local process id")
}

/// The value of `field` in /proc/PID/status, whitespace-normalized.
fn proc_status(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process is alive");
    let line = status.lines().find(|l| l.starts_with(&format!("{field}:"))).expect("the field");
    line[field.len() + 1..].split_whitespace().collect::<Vec<_>>().join(" ")
}

fn all_running(pod: Option<&Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref()?.container_statuses.as_ref()).is_some_and(|cs| {
        cs.len() == 2 && cs.iter().all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    })
}

#[ignore = "looks at the local node agent's processes; tests/run.sh runs it there"]
#[tokio::test]
async fn a_pod_from_an_image_runs_as_its_security_context_says() {
    let ns = TestNamespace::new("image-pod").await;
    let restricted = json!({"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]}});
    // No runAsUser for `restricted`: the image's USER 65532:65532 applies.
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "confined"},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true},
            "containers": [
                miner_container("restricted", restricted),
                miner_container("writable", json!({"runAsUser": 4321, "runAsGroup": 4321})),
            ],
        },
    }))
    .unwrap();
    let pods: Api<Pod> = ns.api();
    create_pod(&pods, &pod, TIMEOUT).await;
    let running = wait_for(&pods, "confined", all_running, TIMEOUT).await.expect("the Pod");

    let restricted = pid_of(&running, "restricted");
    assert_eq!(proc_status(restricted, "Uid"), "65532 65532 65532 65532", "the image's user");
    assert_eq!(proc_status(restricted, "Gid"), "65532 65532 65532 65532");
    assert_eq!(proc_status(restricted, "CapEff"), "0000000000000000");
    assert_eq!(proc_status(restricted, "CapBnd"), "0000000000000000", "drop: [ALL] empties the bounding set");
    assert_eq!(proc_status(restricted, "NoNewPrivs"), "1");
    let root = std::fs::read_link(format!("/proc/{restricted}/root")).unwrap();
    assert!(root.ends_with("rootfs/restricted"), "chrooted into the image's root, not /: {root:?}");
    // Its root is the image's: the binary and the mount points, no shell.
    let inside = |pid: u32, path: &str| std::path::PathBuf::from(format!("/proc/{pid}/root{path}"));
    assert!(inside(restricted, "/miner").is_file());
    assert!(!inside(restricted, "/bin/sh").exists());
    let denied = std::fs::write(inside(restricted, "/intruder"), b"x").unwrap_err();
    assert_eq!(denied.raw_os_error(), Some(30), "EROFS: the root is read-only even for root: {denied}");

    let writable = pid_of(&running, "writable");
    assert_eq!(proc_status(writable, "Uid"), "4321 4321 4321 4321", "runAsUser wins over the image's user");
    assert_eq!(proc_status(writable, "NoNewPrivs"), "0");
    std::fs::write(inside(writable, "/scratch"), b"x").expect("a root not asked to be read-only is writable");

    Api::<Pod>::namespaced(ns.client.clone(), &ns.name)
        .delete("confined", &DeleteParams::default())
        .await
        .unwrap();
    let gone = eventually("the Pod to be gone", TIMEOUT, || async {
        pods.get_opt("confined").await.ok().map(|p| p.is_none()).filter(|gone| *gone)
    })
    .await;
    assert!(gone);
}

#[ignore = "the local node agent's image store; tests/run.sh runs it there"]
#[tokio::test]
async fn a_missing_image_leaves_the_pod_pending_as_a_kubelet_says_it() {
    let ns = TestNamespace::new("no-image").await;
    let pods: Api<Pod> = ns.api();
    let waiting_with = |reason: &'static str| {
        move |pod: Option<&Pod>| {
            pod.and_then(|p| {
                p.status.as_ref()?.container_statuses.as_ref()?.first()?.state.as_ref()?.waiting.clone()
            })
            .is_some_and(|w| w.reason.as_deref() == Some(reason))
        }
    };
    let absent = |name: &str, policy: &str| -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false,
                     "containers": [{"name": "main", "image": "mining-operator/not-built:dev",
                                     "imagePullPolicy": policy}]},
        }))
        .unwrap()
    };
    // Never pulled: ErrImageNeverPull, naming the image as the runtime normalized it.
    create_pod(&pods, &absent("never", "Never"), TIMEOUT).await;
    let pod = wait_for(&pods, "never", waiting_with("ErrImageNeverPull"), TIMEOUT).await.expect("the Pod");
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"), "it waits for the image, as a kubelet does");
    let message =
        status.container_statuses.unwrap()[0].state.clone().unwrap().waiting.unwrap().message.unwrap();
    assert!(message.contains("docker.io/mining-operator/not-built:dev"), "{message}");
    // Pulled (the default policy): ErrImagePull, then ImagePullBackOff, still Pending.
    create_pod(&pods, &absent("pulled", "IfNotPresent"), TIMEOUT).await;
    let pod = wait_for(&pods, "pulled", waiting_with("ImagePullBackOff"), TIMEOUT).await.expect("the Pod");
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let message =
        status.container_statuses.unwrap()[0].state.clone().unwrap().waiting.unwrap().message.unwrap();
    assert!(message.contains("mining-operator/not-built:dev"), "{message}");
    // A reference that does not parse: InvalidImageName at once.
    let mut invalid = absent("invalid", "IfNotPresent");
    invalid.spec.as_mut().unwrap().containers[0].image = Some("Mining-Operator/Not Valid".into());
    create_pod(&pods, &invalid, TIMEOUT).await;
    wait_for(&pods, "invalid", waiting_with("InvalidImageName"), TIMEOUT).await.expect("the Pod");
}
