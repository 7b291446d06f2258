//! Chaos in the suite: the short plan of `cluster_tests::chaos` (the
//! `chaos-bench` binary runs the long one). Runs alone (see
//! .config/nextest.toml): it restarts the node agent, which fails every Pod
//! running at that moment, other tests' too.

use std::time::Duration;

use cluster_tests::chaos::{Plan, run};

#[ignore = "needs the local cluster, whose node agent it restarts; tests/run.sh runs it there"]
#[tokio::test]
async fn workflows_of_three_callers_survive_killed_operators_frontends_and_node_agents() {
    let plan = Plan {
        workflows: 45,
        blocks: 3,
        difficulty: 8,
        chaos: Duration::from_secs(36),
        kills_each: 3,
        drain_bound: Duration::from_secs(120),
        chart_values: Vec::new(),
    };
    let report = run("chaos", plan).await;
    assert_eq!(report.kills, [3, 3, 3], "{report:?}");
    assert_eq!(report.repeated_starts, 15, "{report:?}");
    eprintln!("{report:?}");
}
