//! The set-ups cluster tests share: a namespace with the CRD, a workflow as a
//! user creates it, waiting for its phase, and the stack of operator and
//! frontend processes a frontend test talks to.

use std::time::Duration;

use kube::api::{Api, ListParams, PostParams};
use mining_api::{MiningWorkflow, WorkflowPhase};

use crate::mcp::{FrontendProcess, Sdk, structured};
use crate::{OperatorProcess, TestNamespace, eventually, install_crd, wait_for};

/// How long a small workflow may take to reach a phase on the test cluster.
pub const WORKFLOW_TIMEOUT: Duration = Duration::from_secs(120);

/// A namespace of its own with the CRD installed.
pub async fn namespace_with_crd(prefix: &str) -> TestNamespace {
    let ns = TestNamespace::new(prefix).await;
    install_crd(&ns.client).await;
    ns
}

/// A MiningWorkflow named `name` with `spec`, as a user would create it.
pub fn workflow(name: &str, spec: serde_json::Value) -> MiningWorkflow {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("a MiningWorkflow")
}

/// Creates [`workflow`]`(name, spec)` in `ns`; the API to watch it with.
pub async fn create_workflow(ns: &TestNamespace, name: &str, spec: serde_json::Value) -> Api<MiningWorkflow> {
    let workflows: Api<MiningWorkflow> = ns.api();
    workflows.create(&PostParams::default(), &workflow(name, spec)).await.expect("create workflow");
    workflows
}

/// The phase of a workflow as `wait_for` sees it (None while absent or unset).
pub fn phase(workflow: Option<&MiningWorkflow>) -> Option<WorkflowPhase> {
    workflow.and_then(|w| w.status.as_ref()).and_then(|s| s.phase)
}

/// Waits up to [`WORKFLOW_TIMEOUT`] for workflow `name` to be in `want`.
pub async fn wait_phase(api: &Api<MiningWorkflow>, name: &str, want: WorkflowPhase) -> MiningWorkflow {
    let reached = move |w: Option<&MiningWorkflow>| phase(w) == Some(want);
    wait_for(api, name, reached, WORKFLOW_TIMEOUT).await.expect("the workflow")
}

/// A namespace with the CRD, an operator and a frontend (with `frontend_args`) watching it.
pub struct Stack {
    pub ns: TestNamespace,
    pub operator: OperatorProcess,
    pub frontend: FrontendProcess,
}

impl Stack {
    pub async fn start(prefix: &str, frontend_args: &[&str]) -> Self {
        let ns = namespace_with_crd(prefix).await;
        let operator = OperatorProcess::start(&ns.name, &[]);
        let frontend = FrontendProcess::start(&ns.name, frontend_args).await;
        Self { ns, operator, frontend }
    }

    /// Every workflow in the stack's namespace.
    pub async fn workflows(&self) -> Vec<MiningWorkflow> {
        let api: Api<MiningWorkflow> = self.ns.api();
        api.list(&ListParams::default()).await.expect("list workflows").items
    }

    /// Polls get_mining_result (with server-side waits) until a final status.
    pub async fn poll_until_final(&self, sdk: Sdk, token: Option<&str>, id: &str) -> serde_json::Value {
        eventually(&format!("{id} to finish"), WORKFLOW_TIMEOUT, || async {
            let arguments = serde_json::json!({"workflow_id": id, "wait_seconds": 10});
            let document = sdk.call(&self.frontend.url(), token, "get_mining_result", arguments).await;
            let outcome = structured(&document).clone();
            (outcome["status"] != "running").then_some(outcome)
        })
        .await
    }
}
