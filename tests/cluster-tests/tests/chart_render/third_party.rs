//! The chart as third-party tools see it: every variant in its `ci/`
//! directory rendered (as `helm template`, checkov and chart-testing read
//! them), validated `--strict` against the JSON schemas of Kubernetes 1.30
//! and 1.35 by kubernetes-validate, and scanned by checkov — each finding
//! either fixed or accepted below with its reason. The CRDs of `crds/`
//! are validated too. The checkers come from PyPI
//! (`tests/tools/install-chart-checkers.sh`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::*;

/// The Kubernetes versions whose schemas every render must satisfy.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.35.0"];

/// checkov findings the chart keeps, by check and kind, with the reason.
const ACCEPTED: [(&str, &str, &str); 12] = [
    (
        "CKV_K8S_11",
        "Deployment",
        "no CPU limits: a limit throttles the operator's reconciles and the frontend's waits under bursts; requests are set and memory is limited",
    ),
    ("CKV_K8S_11", "Pod", "the helm test Pod is a one-shot curl, same as above"),
    (
        "CKV_K8S_15",
        "Deployment",
        "IfNotPresent, not Always: a release's images are immutable tags or digests (`image.digest`), and Always makes every restart depend on the registry",
    ),
    ("CKV_K8S_15", "Pod", "the helm test Pod, same as above"),
    (
        "CKV_K8S_43",
        "Deployment",
        "a tag by default; `operator.image.digest`, `operator.minerImage.digest` and `frontend.image.digest` pin digests (docs/CHART.md)",
    ),
    ("CKV_K8S_43", "Pod", "the helm test Pod's curl image, same as above (`tests.image.digest`)"),
    (
        "CKV_K8S_38",
        "Deployment",
        "both components call the API server with their ServiceAccount's token: it is needed where it is mounted",
    ),
    ("CKV_K8S_8", "Pod", "the helm test Pod runs once and exits: no liveness to probe"),
    ("CKV_K8S_9", "Pod", "the helm test Pod runs once and exits: no readiness to probe"),
    (
        "CKV2_K8S_6",
        "Pod",
        "the helm test Pod must reach the frontend from inside the release: the components' NetworkPolicies admit it, it has none of its own",
    ),
    (
        "CKV2_K8S_5",
        "RoleBinding",
        "the operator may `get` Secrets in the workflow namespace: a tool run's arguments and answers are Secrets it must read back (docs/SECURITY.md, \"What the operator can read\")",
    ),
    (
        "CKV_K8S_40",
        "Deployment",
        "only with OpenShift's security contexts (ci/overrides-values.yaml): the SCC assigns a high UID the chart does not name",
    ),
];

fn checkers() -> PathBuf {
    let output = Command::new(cluster_tests::repo_root().join("tests/tools/install-chart-checkers.sh"))
        .output()
        .expect("install the chart checkers");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// The chart's `ci/*-values.yaml` files.
fn variants() -> Vec<PathBuf> {
    let dir = PathBuf::from(chart()).join("ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    files
}

/// Runs kubernetes-validate `--strict` on `file` for `version`: (success, output).
fn validate(checkers: &PathBuf, version: &str, file: &std::path::Path) -> (bool, String) {
    let output = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "--quiet", "-k", version])
        .arg(file)
        .env("PYTHONPATH", checkers)
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
fn every_ci_variant_passes_kubernetes_validate_and_checkov_finds_only_what_is_accepted() {
    let helm = helm();
    let checkers = checkers();
    let files = variants();
    assert!(files.len() >= 6, "the documented variants: {files:?}");
    let scratch = std::env::temp_dir().join(format!("chart-checks-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut found = BTreeSet::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let rendered = render(&helm, "mining", &["-f", file.to_str().unwrap()]);
        let path = scratch.join(&name);
        std::fs::write(&path, &rendered).unwrap();
        for version in KUBERNETES_VERSIONS {
            let (ok, text) = validate(&checkers, version, &path);
            assert!(ok, "kubernetes-validate --strict -k {version} on {name}:\n{text}");
        }
        let output = Command::new("python3")
            .arg(checkers.join("bin/checkov"))
            .args(["--framework", "kubernetes", "--quiet", "--compact", "-o", "json", "-f"])
            .arg(&path)
            .env("PYTHONPATH", &checkers)
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!("checkov on {name}: {err}: {}", String::from_utf8_lossy(&output.stderr))
        });
        let report = if report.is_array() { report[0].clone() } else { report };
        assert!(
            report["summary"]["passed"].as_u64().unwrap() > 100,
            "checkov checked {name}: {:#}",
            report["summary"]
        );
        for failed in report["results"]["failed_checks"].as_array().unwrap() {
            let kind = failed["resource"].as_str().unwrap().split('.').next().unwrap().to_string();
            found.insert((failed["check_id"].as_str().unwrap().to_string(), kind, name.clone()));
        }
    }
    let accepted: BTreeSet<(&str, &str)> = ACCEPTED.iter().map(|(id, kind, _)| (*id, *kind)).collect();
    let unaccepted: Vec<_> =
        found.iter().filter(|(id, kind, _)| !accepted.contains(&(id.as_str(), kind.as_str()))).collect();
    assert!(unaccepted.is_empty(), "checkov findings neither fixed nor accepted: {unaccepted:#?}");
    let stale: Vec<_> = accepted
        .iter()
        .filter(|(id, kind)| !found.iter().any(|(f_id, f_kind, _)| f_id == id && f_kind == kind))
        .collect();
    assert!(stale.is_empty(), "accepted findings checkov no longer reports (remove them): {stale:?}");
    for version in KUBERNETES_VERSIONS {
        for crd in std::fs::read_dir(cluster_tests::repo_root().join("crds")).unwrap() {
            let crd = crd.unwrap().path();
            let (ok, text) = validate(&checkers, version, &crd);
            assert!(ok, "kubernetes-validate --strict -k {version} on {}:\n{text}", crd.display());
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
