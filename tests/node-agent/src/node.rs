//! The Node object: registration and a Ready heartbeat.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::Config;

const MANAGER: &str = "node-agent";

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

fn status(config: &Config) -> serde_json::Value {
    let capacity = json!({"cpu": config.cpu, "memory": config.memory, "pods": config.max_pods.to_string()});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": config.kubelet_port}},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": config.node_name}],
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "NodeAgentReady",
                "message": "node-agent runs pods as local processes",
                "lastHeartbeatTime": now(), "lastTransitionTime": now(),
            }],
            "nodeInfo": {
                "architecture": std::env::consts::ARCH, "operatingSystem": "linux",
                "kubeletVersion": concat!("node-agent/", env!("CARGO_PKG_VERSION")),
                "kubeProxyVersion": "", "bootID": "", "machineID": "", "systemUUID": "",
                "containerRuntimeVersion": "local-process://", "kernelVersion": "", "osImage": "",
            },
        }
    })
}

/// The Node's labels: what a Pod's `nodeSelector` is matched against.
pub fn labels(config: &Config) -> std::collections::BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", config.node_name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("node.kubernetes.io/instance-type", "node-agent"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .collect()
}

/// Why this node cannot take `pod`, in kube-scheduler's words, if it
/// cannot: a `nodeSelector` its labels do not match. (Affinity, taints and
/// resources are not looked at.)
pub fn cannot_take(config: &Config, pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let selector = pod.spec.as_ref()?.node_selector.as_ref()?;
    let labels = labels(config);
    let matches = selector.iter().all(|(key, value)| labels.get(key) == Some(value));
    (!matches).then(|| "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.".into())
}

pub async fn register(client: &kube::Client, config: &Config) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let params = PatchParams::apply(MANAGER).force();
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": config.node_name, "labels": labels(config)},
        "spec": {"podCIDR": format!("{}/16", config.pod_cidr), "podCIDRs": [format!("{}/16", config.pod_cidr)]},
    });
    nodes.patch(&config.node_name, &params, &Patch::Apply(node)).await?;
    nodes.patch_status(&config.node_name, &params, &Patch::Apply(status(config))).await?;
    tracing::info!(node = %config.node_name, "node registered");
    Ok(())
}

/// Renews the Ready condition so the Node keeps looking alive.
pub async fn heartbeat(client: kube::Client, config: Config) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        tick.tick().await;
        if let Err(err) = register(&client, &config).await {
            tracing::warn!(error = %err, "node heartbeat failed");
        }
    }
}

/// Marks the Pod `namespace/name` unscheduled for want of room, in
/// kube-scheduler's words (`0/1 nodes are available: 1 Too many pods.`).
pub async fn tell_full(client: &kube::Client, namespace: &str, name: &str) {
    let pods: kube::api::Api<k8s_openapi::api::core::v1::Pod> =
        kube::api::Api::namespaced(client.clone(), namespace);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let patch = serde_json::json!({"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/1 nodes are available: 1 Too many pods.", "lastTransitionTime": now}]}});
    if let Err(err) =
        pods.patch_status(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await
    {
        tracing::debug!(pod = %format!("{namespace}/{name}"), error = %err, "could not say the node is full");
    }
}
