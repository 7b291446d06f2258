//! The few writes and reads the frontend makes on the API server (for work
//! of every kind, its ledgers and its proofs), each bounded
//! in time so that an unreachable API server never holds a caller past its budget.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use mining_api::{MiningWorkflow, labels};
use serde_json::json;

use crate::ids::{Caller, WorkId};
use crate::ownership::OwnershipKeys;
use crate::tools::StartRequest;
use crate::{Error, Result};

/// Longest any one API call may take.
pub const API_TIMEOUT: Duration = Duration::from_secs(10);

/// The value of `app.kubernetes.io/managed-by` on workflows started here.
pub const MANAGER: &str = "mcp-frontend";

/// The object `start_mining` creates: named by its id, labelled by its
/// caller, and carrying the frontend's proof that it made it for that caller.
pub fn build_workflow(
    keys: &OwnershipKeys,
    namespace: &str,
    id: &WorkId,
    caller: &Caller,
    request: &StartRequest,
    annotations: &[(&str, String)],
) -> MiningWorkflow {
    let mut workflow = MiningWorkflow::new(id.as_str(), request.spec.clone());
    workflow.metadata.labels = Some(
        [
            (labels::CALLER.to_string(), keys.caller_label(&caller.digest)),
            (labels::MANAGED_BY.to_string(), MANAGER.to_string()),
        ]
        .into(),
    );
    workflow.metadata.namespace = Some(namespace.to_string());
    let mut written: std::collections::BTreeMap<String, String> =
        annotations.iter().map(|(key, value)| (key.to_string(), value.clone())).collect();
    workflow.metadata.annotations = Some(written.clone());
    // The proof covers everything above; it is added last.
    written.insert(mining_api::annotations::OWNER_PROOF.to_string(), keys.proof(&workflow));
    workflow.metadata.annotations = Some(written);
    workflow
}

/// What came of a create (of a workflow or a tool run).
pub enum Created<K = MiningWorkflow> {
    New(Box<K>),
    /// The name was taken: the existing object, as it is now.
    Existing(Box<K>),
}

async fn bounded<T>(call: &'static str, future: impl Future<Output = kube::Result<T>>) -> Result<T> {
    match tokio::time::timeout(API_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(Error::Api { call, source }),
        Err(_) => Err(Error::ApiTimeout { call, after: API_TIMEOUT }),
    }
}

/// Creates the work (a workflow or a tool run), or returns the object
/// already holding its name.
pub async fn create<K: mining_api::Work>(api: &Api<K>, workflow: &K) -> Result<Created<K>> {
    let params = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    match tokio::time::timeout(API_TIMEOUT, api.create(&params, workflow)).await {
        Ok(Ok(created)) => Ok(Created::New(Box::new(created))),
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
            let name = workflow.meta().name.as_deref().unwrap_or_default();
            match get(api, name).await? {
                Some(existing) => Ok(Created::Existing(Box::new(existing))),
                // Deleted between the two calls: the caller may simply retry.
                None => Err(Error::Conflict { name: name.to_string() }),
            }
        }
        Ok(Err(source)) => Err(Error::Api { call: "create", source }),
        Err(_) => Err(Error::ApiTimeout { call: "create", after: API_TIMEOUT }),
    }
}

/// Reads one workflow or tool run from the API server (for names the cache has not seen yet).
pub async fn get<K: mining_api::Work>(api: &Api<K>, name: &str) -> Result<Option<K>> {
    bounded("get", api.get_opt(name)).await
}

/// Asks the operator to stop the work (of any kind): sets `spec.cancel`, and
/// writes the current proof when the work carries an older version's
/// (`reproof`).
pub async fn request_cancel<K: mining_api::Work>(
    api: &Api<K>,
    work: &K,
    reproof: Option<String>,
) -> Result<K> {
    let name = work.meta().name.as_deref().unwrap_or_default();
    // Only on the version the decision was made on (409 otherwise): a
    // cancel never lands on a workflow that finished meanwhile, and the
    // operator's status write, made on the version before, conflicts.
    let mut patch = json!({
        "metadata": {"resourceVersion": work.meta().resource_version},
        "spec": {"cancel": true},
    });
    if let Some(proof) = reproof {
        patch["metadata"]["annotations"] = json!({mining_api::annotations::OWNER_PROOF: proof});
    }
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    bounded("patch", api.patch(name, &params, &Patch::Merge(patch))).await
}

/// Records a caller's answers to a tool run (see `core::respond`): a merge
/// patch that carries the version it was decided on, so it lands only there.
pub async fn record_answers(
    api: &Api<mining_api::ToolRun>,
    name: &str,
    patch: serde_json::Value,
) -> Result<mining_api::ToolRun> {
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    bounded("patch", api.patch(name, &params, &Patch::Merge(patch))).await
}

/// Writes the current proof over an older version's: the proof covers the
/// work (a workflow or a tool run) as it was verified, so a change made
/// meanwhile is not blessed.
pub async fn write_proof<K: mining_api::Work>(api: &Api<K>, name: &str, proof: &str) -> Result<K> {
    let patch = json!({"metadata": {"annotations": {mining_api::annotations::OWNER_PROOF: proof}}});
    bounded("patch", api.patch(name, &PatchParams::default(), &Patch::Merge(patch))).await
}

/// What the API server can do, from its version (taken as current when it
/// cannot be read in time: the verdicts it feeds only add caveats).
pub async fn server_features(client: &kube::Client) -> mining_api::server_features::ServerFeatures {
    use mining_api::server_features::ServerFeatures;
    match tokio::time::timeout(API_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(info)) => {
            let features = ServerFeatures::from_version(&info.major, &info.minor, &info.git_version);
            tracing::info!(version = %features.version, indexed_jobs = features.indexed_jobs, "read the API server's version");
            features
        }
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "reading the API server's version failed; assuming a current one");
            ServerFeatures::current()
        }
        Err(_) => {
            tracing::warn!("reading the API server's version timed out; assuming a current one");
            ServerFeatures::current()
        }
    }
}

#[cfg(test)]
mod tests {
    use mining_api::MiningWorkflowSpec;

    use super::*;

    #[test]
    fn built_workflow_is_named_by_its_id_and_labelled_by_its_caller() {
        let keys = OwnershipKeys::new(vec![3; 32], None).unwrap();
        let caller = Caller::new("alice");
        let id = WorkId::random(&keys, &caller).unwrap();
        let spec = MiningWorkflowSpec { blocks: 3, parallelism: 2, ..MiningWorkflowSpec::new(9) };
        let request = StartRequest { spec, wait_seconds: 0, idempotency_key: None };
        let workflow = build_workflow(&keys, "ns", &id, &caller, &request, &[("k", "v".into())]);
        assert!(keys.proves(&workflow), "it carries the frontend's proof");
        assert!(crate::core::belongs_to(&keys, &workflow, &caller));
        assert!(!crate::core::belongs_to(&keys, &workflow, &Caller::new("bob")));
        assert_eq!(workflow.metadata.name.as_deref(), Some(id.as_str()));
        assert_eq!(workflow.metadata.generate_name, None);
        assert_eq!(
            workflow.metadata.labels.as_ref().unwrap()[labels::CALLER],
            keys.caller_label(&caller.digest)
        );
        assert_ne!(workflow.metadata.labels.as_ref().unwrap()[labels::CALLER], caller.digest, "keyed");
        assert_eq!((workflow.spec.difficulty, workflow.spec.blocks, workflow.spec.cancel), (9, 3, false));
        assert_eq!(workflow.spec.parallelism, 2);
    }
}
