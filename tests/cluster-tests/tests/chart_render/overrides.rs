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
