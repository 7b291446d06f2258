//! Which replica serves the embedded store: the leader labels its own Pod
//! (`mining-operator.dev/outputs-leader: "true"`), and the chart's outputs
//! Service selects that label, so tool Pods upload to — and the frontend
//! reads from — the replica whose disk holds the files. A deposed leader
//! takes its label off. Only with `POD_NAME` and `POD_NAMESPACE` set (the
//! chart sets both); elsewhere there is nothing to label.

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

/// The label the outputs Service selects.
pub const LEADER_LABEL: &str = "mining-operator.dev/outputs-leader";

/// Sets (leading) or removes this replica's label; failures are logged and
/// tried again at the next change of leadership.
pub async fn mark(client: Client, leading: bool) {
    let (Ok(name), Ok(namespace)) = (std::env::var("POD_NAME"), std::env::var("POD_NAMESPACE")) else {
        return;
    };
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let value = if leading { serde_json::json!("true") } else { serde_json::Value::Null };
    let patch = serde_json::json!({"metadata": {"labels": {LEADER_LABEL: value}}});
    match pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => tracing::info!(pod = %name, leading, "outputs leader label set"),
        Err(err) => {
            tracing::warn!(pod = %name, leading, error = %err, "cannot label this Pod as the outputs leader")
        }
    }
}
