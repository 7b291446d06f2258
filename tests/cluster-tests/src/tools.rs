//! What the tests of defined tools share: an `McpTool` like the example
//! `sum-numbers`, a namespace with an operator and a tokens-mode frontend
//! (alice and bob), and calls through the official SDKs.

use std::time::Duration;

use kube::api::{Api, ListParams};
use mining_api::McpTool;
use serde_json::{Value, json};

use crate::mcp::{FrontendProcess, Sdk, ownership_key_file, structured};
use crate::{OperatorProcess, TestNamespace, eventually, install_crd};

pub const ALICE: Option<&str> = Some("alice-secret");
pub const BOB: Option<&str> = Some("bob-secret");
pub const IMAGE: &str = "localhost/mining-operator/sum-numbers:dev";
pub const DEPLOY_GATE_IMAGE: &str = "localhost/mining-operator/deploy-gate:dev";
pub const REPORT_IMAGE: &str = "localhost/mining-operator/report:dev";

pub fn tool(name: &str, wait_budget_seconds: u32, extra: Value) -> McpTool {
    let mut value = json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "McpTool",
        "metadata": {"name": name},
        "spec": {
            "description": "Adds numbers.",
            "inputSchema": {"type": "object", "properties": {
                "numbers": {"type": "array", "items": {"type": "number"}},
                "delay_seconds": {"type": "integer", "minimum": 0, "maximum": 600},
                "label": {"type": "string"}, "fail": {"type": "string"}},
                "required": ["numbers"], "additionalProperties": false},
            "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]},
            "waitBudgetSeconds": wait_budget_seconds,
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "tool", "image": IMAGE}]}}}},
        },
    });
    if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(value).unwrap()
}

/// The example `deploy-gate`: asks its caller to approve, then deploys.
pub fn deploy_gate(wait_budget_seconds: u32) -> McpTool {
    serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "McpTool",
        "metadata": {"name": "deploy-gate"},
        "spec": {
            "description": "Deploys a service once a person approves it.",
            "inputSchema": {"type": "object", "properties": {
                "service": {"type": "string"}, "version": {"type": "string"},
                "release_note": {"type": "boolean"}},
                "required": ["service", "version"], "additionalProperties": false},
            "outputSchema": {"type": "object", "properties": {"deployed": {"type": "boolean"}}, "required": ["deployed"]},
            "waitBudgetSeconds": wait_budget_seconds,
            "inputDeadlineSeconds": 3600,
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "tool", "image": DEPLOY_GATE_IMAGE}]}}}},
        },
    }))
    .unwrap()
}

/// The example `report` (uploads a CSV of `rows` rows and an SVG chart),
/// defined exactly as docs/TOOLS.md's "Files" section prints it.
pub fn report_tool() -> McpTool {
    let yaml = crate::docs::blocks("docs/TOOLS.md", "## Files: results beyond 4 KiB", "yaml");
    let tool = crate::docs::mcp_tool_from_yaml(&yaml[0]);
    let image = tool
        .spec
        .job_template
        .spec
        .as_ref()
        .and_then(|job| job.template.spec.as_ref()?.containers.first()?.image.clone());
    assert_eq!(image.as_deref(), Some(REPORT_IMAGE), "the documented tool runs the example's image");
    tool
}

pub async fn setup(name: &str) -> (TestNamespace, OperatorProcess, FrontendProcess) {
    setup_with(name, &[]).await
}

pub async fn setup_with(
    name: &str,
    operator_args: &[&str],
) -> (TestNamespace, OperatorProcess, FrontendProcess) {
    setup_with_args(name, operator_args, &[]).await
}

/// [`setup_with`] with `frontend_args` for the tokens-mode frontend too.
pub async fn setup_with_args(
    name: &str,
    operator_args: &[&str],
    frontend_args: &[&str],
) -> (TestNamespace, OperatorProcess, FrontendProcess) {
    let (ns, operator) = namespace_and_operator(name, operator_args).await;
    let frontend =
        FrontendProcess::start_with_tokens(&ns.name, "alice-secret alice\nbob-secret bob\n", frontend_args)
            .await;
    let tools: Api<McpTool> = ns.api();
    eventually("McpTools to be served", Duration::from_secs(30), || async {
        tools.list(&ListParams::default().limit(1)).await.ok().map(|_| ())
    })
    .await;
    (ns, operator, frontend)
}

/// [`setup_with_args`] with the operator keeping tools' files in an
/// embedded store (a new directory, returned) served on a free port, the
/// frontend reading them there, and `operator_args` besides.
pub async fn setup_with_embedded_store(
    name: &str,
    operator_args: &[&str],
) -> (TestNamespace, OperatorProcess, FrontendProcess, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("mining-outputs-{name}-{}", crate::free_port().port()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("file://{}", dir.display());
    let addr = crate::free_port().to_string();
    let base = format!("http://{addr}");
    let mut args = vec!["--outputs-store", &store, "--outputs-url", &base, "--outputs-addr", &addr];
    args.extend_from_slice(operator_args);
    let (ns, operator, frontend) = setup_with_args(name, &args, &["--outputs-url", &base]).await;
    (ns, operator, frontend, dir)
}

/// [`setup`] with a frontend of `frontend_args` (e.g. another auth mode)
/// instead of the tokens-mode one.
pub async fn setup_with_frontend_args(
    name: &str,
    frontend_args: &[&str],
) -> (TestNamespace, OperatorProcess, FrontendProcess) {
    setup_with_operator_and_frontend_args(name, &[], frontend_args).await
}

/// [`setup_with_frontend_args`] with `operator_args` for the operator too.
pub async fn setup_with_operator_and_frontend_args(
    name: &str,
    operator_args: &[&str],
    frontend_args: &[&str],
) -> (TestNamespace, OperatorProcess, FrontendProcess) {
    let (ns, operator) = namespace_and_operator(name, operator_args).await;
    let frontend = FrontendProcess::start(&ns.name, frontend_args).await;
    (ns, operator, frontend)
}

/// A namespace with the CRDs and an operator (with the frontends' key and
/// `operator_args`) watching it.
async fn namespace_and_operator(name: &str, operator_args: &[&str]) -> (TestNamespace, OperatorProcess) {
    let ns = TestNamespace::new(name).await;
    install_crd(&ns.client).await;
    let key = ownership_key_file(&ns.name);
    let mut args = vec!["--ownership-key-file", key.to_str().unwrap()];
    args.extend_from_slice(operator_args);
    let operator = OperatorProcess::start(&ns.name, &args);
    (ns, operator)
}

pub async fn listed_names(url: &str) -> Vec<String> {
    listed_names_for(url, ALICE).await
}

/// The tool names `tools/list` answers the caller of `token`.
pub async fn listed_names_for(url: &str, token: Option<&str>) -> Vec<String> {
    let listed = Sdk::TypeScript.run(url, token, false, &["tools"]).await;
    listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

/// Polls `get_tool_result` (20 s a call, the frontend's budget) until the
/// run is no longer running, for at most two minutes.
pub async fn settle(sdk: Sdk, url: &str, token: Option<&str>, id: &str) -> Value {
    for _ in 0..6 {
        let seen =
            call(sdk, url, token, "get_tool_result", json!({"workflow_id": id, "wait_seconds": 20})).await;
        if seen["status"] != "running" {
            return seen;
        }
    }
    panic!("run {id} still running after two minutes");
}

pub async fn call(sdk: Sdk, url: &str, token: Option<&str>, tool: &str, arguments: Value) -> Value {
    structured(&sdk.call(url, token, tool, arguments).await).clone()
}

/// Creates `defined` in `ns` and waits until the frontend at `url` lists it.
pub async fn define(ns: &TestNamespace, url: &str, defined: McpTool) {
    let name = defined.metadata.name.clone().expect("a tool name");
    let tools: Api<McpTool> = ns.api();
    tools.create(&kube::api::PostParams::default(), &defined).await.unwrap();
    eventually("the tool to be listed", Duration::from_secs(30), || async {
        listed_names(url).await.contains(&name).then_some(())
    })
    .await;
}

/// The chart's `-mcp-caller` ClusterRole rule (`templates/operator-rbac.yaml`):
/// what every MCP caller needs with `--auth kubernetes`.
pub fn mcp_caller_rule() -> k8s_openapi::api::rbac::v1::PolicyRule {
    use mining_api::mcp_permission;
    k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![mining_api::GROUP.into()]),
        resources: Some(vec![format!("{}/{}", mcp_permission::RESOURCE, mcp_permission::SUBRESOURCE)]),
        verbs: vec![mcp_permission::VERB.into()],
        ..Default::default()
    }
}

/// The MCP conformance suite's fixture tools as McpTools
/// (tests/mcp-clients/fixtures.yaml, the example image mcp-fixtures).
pub fn conformance_fixtures() -> Vec<McpTool> {
    let text = std::fs::read_to_string(crate::mcp::clients_dir().join("fixtures.yaml")).unwrap();
    text.split("\n---\n")
        .skip(1)
        .map(|doc| serde_json::from_str(doc).unwrap_or_else(|err| panic!("{err}: {doc}")))
        .collect()
}

/// The fixture listed as `tool_name`.
pub fn conformance_fixture(tool_name: &str) -> McpTool {
    conformance_fixtures()
        .into_iter()
        .find(|tool| tool.mcp_name() == tool_name)
        .expect("a fixture of that name")
}
