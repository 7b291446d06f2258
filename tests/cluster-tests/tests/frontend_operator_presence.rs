//! "Is anyone mining?": with no operator running, a started workflow is
//! recorded and answers `running`, saying that no operator is running
//! (reason NoOperator) rather than looking merely queued; when an operator
//! comes, the same workflow completes; when it dies, new answers say so again.

use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, Sdk, structured};
use cluster_tests::{OperatorProcess, assert_reference_chain, eventually, namespace_with_crd};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(90);
const LEASE_SECONDS: u64 = 4;

async fn call(frontend: &FrontendProcess, tool: &str, arguments: Value) -> Value {
    structured(&Sdk::Python.call(&frontend.url(), None, tool, arguments).await).clone()
}

async fn leading(frontend: &FrontendProcess, want: f64) {
    eventually(&format!("mcp_frontend_operator_leading {want}"), TIMEOUT, || async {
        (frontend.metric("mcp_frontend_operator_leading").await == want).then_some(())
    })
    .await
}

#[tokio::test]
async fn without_an_operator_the_answer_says_nobody_is_working_and_the_work_waits_for_one() {
    let ns = namespace_with_crd("presence").await;
    let lease = format!("{}/mining-operator", ns.name);
    let frontend = FrontendProcess::start(&ns.name, &["--operator-lease", &lease]).await;

    // No operator has ever led: the start is recorded, and says why nothing happens.
    leading(&frontend, 0.0).await;
    let started =
        call(&frontend, "start_mining", json!({"difficulty": 8, "blocks": 2, "wait_seconds": 0})).await;
    assert_eq!(started["status"], "running", "{started:#}");
    assert_eq!(started["reason"], "NoOperator", "{started:#}");
    let message = started["status_message"].as_str().unwrap();
    assert!(message.contains("No operator is running: the work is recorded"), "{message}");
    let id = started["workflow_id"].as_str().unwrap().to_string();

    // An operator comes: the frontend sees it lead, and the same workflow completes.
    let mut operator = OperatorProcess::start_replica(&ns.name, "operator-a", LEASE_SECONDS, &[]);
    leading(&frontend, 1.0).await;
    let outcome = eventually("the workflow to complete", TIMEOUT, || async {
        let polled =
            call(&frontend, "get_mining_result", json!({"workflow_id": id, "wait_seconds": 10})).await;
        (polled["status"] != "running").then_some(polled)
    })
    .await;
    assert_reference_chain(&outcome, 2, 8);
    assert!(outcome.get("reason").is_none(), "{outcome:#}");

    // It dies: once its term (and as much again for clock skew) has run out,
    // answers say so again, with when.
    operator.kill();
    leading(&frontend, 0.0).await;
    let again =
        call(&frontend, "start_mining", json!({"difficulty": 8, "blocks": 1, "wait_seconds": 0})).await;
    assert_eq!(again["reason"], "NoOperator", "{again:#}");
    let message = again["status_message"].as_str().unwrap();
    assert!(message.contains("No operator is running since 20"), "{message}");
}
