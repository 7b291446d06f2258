//! The official MCP conformance suite, run as its maintainers run it,
//! against the frontend with a real operator. The suite's fixture tools are
//! McpTools (tests/mcp-clients/fixtures.yaml, the example image
//! mining-operator/mcp-fixtures), so every scenario that calls a tool calls
//! a ToolRun that runs as a Job: content of every type, progress, errors,
//! and asking on a plain call (MRTR) across Jobs. What may fail is listed,
//! with reasons, in tests/mcp-clients/conformance-expected-failures-*.yaml
//! (strict: an unlisted failure fails, and so does a listed pass).

use std::time::Duration;

use cluster_tests::eventually;
use cluster_tests::mcp::conformance;
use cluster_tests::tasks::conformance_checks;
use cluster_tests::tools::{conformance_fixtures, listed_names_for, setup_with_operator_and_frontend_args};
use kube::api::{Api, PostParams};
use mining_api::McpTool;

/// The suite's summary lines (what docs/MCP.md quotes).
fn summary(output: &str) -> String {
    output
        .lines()
        .filter(|line| line.contains("passed") || line.contains("Baseline"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_suite_passes_every_required_scenario_but_prompts_and_completions_against_tool_runs() {
    // One caller (the suite) makes a few hundred calls in minutes, some of
    // them a minute long: room for it, which the defaults would ration.
    let (ns, _operator, frontend) = setup_with_operator_and_frontend_args(
        "conformance",
        &["--max-tool-runs-per-caller", "40", "--max-concurrent-tool-runs", "40"],
        &["--max-starts-per-minute", "1000", "--max-running-per-caller", "1000"],
    )
    .await;
    let url = frontend.url();
    let tools: Api<McpTool> = ns.api();
    let fixtures = conformance_fixtures();
    for tool in &fixtures {
        tools.create(&PostParams::default(), tool).await.unwrap();
    }
    eventually("every fixture to be listed", Duration::from_secs(60), || async {
        let names = listed_names_for(&url, None).await;
        fixtures.iter().all(|tool| names.iter().any(|name| name == tool.mcp_name())).then_some(())
    })
    .await;
    for (selection, baseline) in [
        (&["--requirements", "2026-07-28"][..], "conformance-expected-failures-2026-07-28.yaml"),
        (
            &["--suite", "all", "--spec-version", "2025-11-25"][..],
            "conformance-expected-failures-2025-11-25.yaml",
        ),
    ] {
        let (ok, output) = conformance(&url, selection, baseline).await;
        println!("conformance {selection:?}:\n{}", summary(&output));
        assert!(ok, "conformance {selection:?}: failures outside the baseline\n{output}");
        assert!(output.contains("Baseline check passed"), "{output}");
    }
    // The Tasks extension's scenarios (unscored by the requirements): every
    // check passes (a check the suite itself skips is not a failure).
    let mut failed = Vec::new();
    for scenario in TASK_SCENARIOS {
        for check in conformance_checks(&url, scenario).await {
            if matches!(check["status"].as_str(), Some("FAILURE" | "WARNING")) {
                let id = format!("{scenario}/{}", check["id"].as_str().unwrap_or_default());
                failed.push((id, check["errorMessage"].to_string()));
            }
        }
    }
    // On stdout too, which a CI excerpt shows before the processes' logs.
    println!("Tasks extension checks that did not pass: {failed:#?}");
    assert!(failed.is_empty(), "Tasks extension checks that did not pass: {failed:#?}");
}

const TASK_SCENARIOS: [&str; 9] = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];
