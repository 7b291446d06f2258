//! The MCP Inspector CLI against the frontend (the conformance suite: conformance.rs).

use cluster_tests::mcp::{FrontendProcess, inspector};
use cluster_tests::{OperatorProcess, TestNamespace, install_crd, reference_chain};

#[tokio::test]
async fn the_inspector_cli_lists_the_tools_and_mines_a_chain() {
    let ns = TestNamespace::new("mcp-inspector").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start(&ns.name, &[]).await;

    let (ok, listed, output) = inspector(&frontend.url(), &["--method", "tools/list"]).await;
    assert!(ok, "{output}");
    let names: Vec<&str> =
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["start_mining", "get_mining_result", "cancel_mining", "list_mining_workflows"]);
    for tool in listed["tools"].as_array().unwrap() {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert!(tool["outputSchema"].is_object(), "{tool}");
    }

    let (ok, called, output) = inspector(
        &frontend.url(),
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "start_mining",
            "--tool-arg",
            "difficulty=11",
            "--tool-arg",
            "blocks=2",
        ],
    )
    .await;
    assert!(ok, "{output}");
    let outcome = &called["structuredContent"];
    assert_eq!(outcome["status"], "completed", "{called:#}");
    let reference = reference_chain(2, 11);
    for (got, want) in outcome["result"]["blocks"].as_array().unwrap().iter().zip(&reference) {
        assert_eq!((&got["nonce"], &got["hash"]), (&want["nonce"], &want["hash"]));
    }
    // A tool error reaches the Inspector as a result with isError.
    let (_, refused, output) = inspector(
        &frontend.url(),
        &["--method", "tools/call", "--tool-name", "start_mining", "--tool-arg", "difficulty=99"],
    )
    .await;
    assert_eq!(refused["isError"], true, "{output}");
}
