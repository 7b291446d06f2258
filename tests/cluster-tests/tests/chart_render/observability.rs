//! What the chart renders for operations: metrics and alerts that parse,
//! tracing off by default and on with one value.

use super::*;

/// `PREFIX_name` of every metric the operator and the frontend register.
fn registered_metric_families() -> std::collections::BTreeSet<String> {
    let mut families = std::collections::BTreeSet::new();
    for source in ["operator/src/metrics.rs", "mcp-frontend/src/metrics.rs"] {
        let text = std::fs::read_to_string(cluster_tests::repo_root().join(source)).unwrap();
        let literal = |rest: &str| rest.split('"').nth(1).map(str::to_string);
        let prefix = literal(text.split_once("with_prefix(").expect("a prefixed registry").1).unwrap();
        for (at, _) in text.match_indices("registry.register(") {
            families.insert(format!("{prefix}_{}", literal(&text[at..]).unwrap()));
        }
    }
    assert!(families.len() > 10, "{families:?}");
    families
}

#[test]
fn every_alert_and_dashboard_query_parses_as_promql() {
    use std::io::Write;
    let queries = chart_queries(&helm(), "release", "mining");
    assert!(queries.len() >= 8 + 11, "{queries:#?}");
    // Each reads this release's series only.
    for query in &queries {
        assert!(query.contains("namespace=\"mining\""), "{query}");
    }
    // Every family they read is one the components register (empty
    // families are not scraped, so their code is the record).
    let registered = registered_metric_families();
    for family in metric_families(&queries) {
        assert!(registered.contains(&family), "the chart reads {family}; registered: {registered:?}");
    }
    // Prometheus's own grammar (lezer-promql), not a regex, says whether each parses.
    let check = |queries: &[String]| -> Vec<serde_json::Value> {
        let mut child = Command::new("node")
            .arg(clients_dir().join("promql-check.mjs"))
            .current_dir(clients_dir())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("node");
        child.stdin.take().unwrap().write_all(serde_json::to_string(queries).unwrap().as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        (String::from_utf8_lossy(&output.stdout).lines())
            .map(|l| serde_json::from_str(l).expect("one JSON line per query"))
            .collect()
    };
    let verdicts = check(&queries);
    assert_eq!(verdicts.len(), queries.len());
    for verdict in verdicts {
        assert_eq!(verdict["ok"], true, "{verdict}");
    }
    // And the checker can say no.
    let refused = check(&["sum(rate(x[5m]) >".to_string()]);
    assert_eq!(refused[0]["ok"], false, "{refused:?}");
}

#[test]
fn tracing_is_off_by_default_and_one_value_turns_it_on_for_every_component() {
    let helm = helm();
    let quiet = render(&helm, "default", &[]);
    assert!(!quiet.contains("OTEL_EXPORTER_OTLP"), "no export unless asked");
    assert!(!quiet.contains("--miner-otlp-endpoint"));
    let traced = render(&helm, "default", &["--set", "tracing.otlpEndpoint=http://collector.obs:4318"]);
    let endpoint =
        "- name: OTEL_EXPORTER_OTLP_ENDPOINT\n              value: \"http://collector.obs:4318\"\n";
    assert_eq!(traced.matches(endpoint).count(), 2, "the operator and the frontend export: {traced}");
    assert!(traced.contains("- --miner-otlp-endpoint=http://collector.obs:4318\n"), "and the block Jobs");
    let no_jobs = render(
        &helm,
        "default",
        &["--set", "tracing.otlpEndpoint=http://collector.obs:4318", "--set", "tracing.jobs=false"],
    );
    assert!(!no_jobs.contains("--miner-otlp-endpoint"));
}
