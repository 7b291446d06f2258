//! The override conventions the anchor charts share, rendered: how many old
//! ReplicaSets each Deployment keeps, and the frontend's extra environment
//! (a proxy, as the operator's already takes).

use super::*;

#[test]
fn revision_history_and_the_frontends_extra_environment_reach_the_deployments() {
    let helm = helm();
    let deployments = |manifests: &str| -> Vec<String> {
        manifests.split("\n---\n").filter(|d| d.contains("kind: Deployment\n")).map(str::to_string).collect()
    };
    let default = render(&helm, "default", &[]);
    let found = deployments(&default);
    assert_eq!(found.len(), 2, "the operator and the frontend");
    for deployment in &found {
        assert!(deployment.contains("\n  revisionHistoryLimit: 10\n"), "{deployment}");
        assert!(!deployment.contains("HTTPS_PROXY"), "{deployment}");
    }
    let set = render(
        &helm,
        "default",
        &[
            "--set",
            "revisionHistoryLimit=3",
            "--set-json",
            r#"frontend.extraEnv=[{"name":"HTTPS_PROXY","value":"http://proxy.example:3128"}]"#,
        ],
    );
    for deployment in deployments(&set) {
        assert!(deployment.contains("\n  revisionHistoryLimit: 3\n"), "{deployment}");
        let frontend = deployment.contains("component: frontend");
        assert_eq!(deployment.contains("- name: HTTPS_PROXY\n"), frontend, "{deployment}");
    }
    let refused = Command::new(&helm)
        .args(["template", "release", &chart(), "--set", "revisionHistoryLimit=-1"])
        .args(THROWAWAY_KEY)
        .output()
        .unwrap();
    assert!(!refused.status.success(), "a negative history is refused by the schema");
}

#[test]
fn an_existing_service_account_is_bound_but_not_made_and_must_be_named() {
    let helm = helm();
    let existing = render(
        &helm,
        "default",
        &["--set", "frontend.serviceAccount.create=false", "--set", "frontend.serviceAccount.name=team-mcp"],
    );
    assert!(!existing.contains("kind: ServiceAccount\nmetadata:\n  name: team-mcp\n"), "not made");
    assert!(existing.contains("      serviceAccountName: team-mcp\n"), "the frontend runs as it");
    let bound = existing.matches("  - kind: ServiceAccount\n    name: team-mcp\n").count();
    assert!(bound >= 3, "every frontend binding names it ({bound})");
    assert!(
        !existing.contains("name: release-mining-operator-frontend\n    namespace"),
        "no binding names the chart's own"
    );
    let unnamed = Command::new(&helm)
        .args(["template", "release", &chart(), "--set", "frontend.serviceAccount.create=false"])
        .args(THROWAWAY_KEY)
        .output()
        .unwrap();
    assert!(!unnamed.status.success());
    assert!(String::from_utf8_lossy(&unnamed.stderr).contains("set frontend.serviceAccount.name"));
}

#[test]
fn every_value_is_in_this_table() {
    let values: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(format!("{}/values.yaml", chart())).unwrap()).unwrap();
    let doc = std::fs::read_to_string(cluster_tests::repo_root().join("docs/CHART.md")).unwrap();
    // A value is named when a code span of the page holds its key as a word.
    let spans: Vec<&str> = doc.split('`').skip(1).step_by(2).collect();
    let named = |key: &str| {
        spans.iter().any(|span| {
            span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|word| word == key)
        })
    };
    let mut missing = Vec::new();
    for (key, value) in values.as_mapping().unwrap() {
        let key = key.as_str().unwrap();
        if !named(key) {
            missing.push(key.to_string());
        }
        for (inner, _) in value.as_mapping().into_iter().flatten() {
            let inner = inner.as_str().unwrap();
            if !named(inner) {
                missing.push(format!("{key}.{inner}"));
            }
        }
    }
    assert!(missing.is_empty(), "values docs/CHART.md does not name: {missing:?}");
}
