//! The Dockerfiles cannot be built here (no Docker engine), so their promises
//! are checked against the workspace instead: each builds a package that
//! exists, copies the binary that package has, runs it as its entrypoint as a
//! non-root numeric user, and is tagged as the chart expects it.

use cluster_tests::repo_root;
use serde_json::Value;

/// The workspace's packages and their binary targets, from `cargo metadata`.
fn workspace_binaries() -> Vec<(String, Vec<String>)> {
    let output = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|package| {
            let bins = package["targets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect();
            (package["name"].as_str().unwrap().to_string(), bins)
        })
        .collect()
}

/// The word after `flag` in `text`.
fn after<'a>(text: &'a str, flag: &str) -> Option<&'a str> {
    let start = text.find(flag)? + flag.len();
    text[start..].split_whitespace().next()
}

#[test]
fn each_dockerfile_builds_a_real_binary_and_runs_it_as_non_root() {
    let binaries = workspace_binaries();
    let values = std::fs::read_to_string(repo_root().join("charts/mining-operator/values.yaml")).unwrap();
    for (dockerfile, binary, chart_repository) in [
        ("miner/Dockerfile", "miner", "mining-operator/miner"),
        ("operator/Dockerfile", "operator", "mining-operator/operator"),
        ("mcp-frontend/Dockerfile", "mcp-frontend", "mining-operator/mcp-frontend"),
    ] {
        let text = std::fs::read_to_string(repo_root().join(dockerfile)).unwrap();
        let package = after(&text, " -p ").unwrap_or_else(|| panic!("{dockerfile}: no `cargo build -p`"));
        let (_, bins) = binaries.iter().find(|(name, _)| name == package).unwrap_or_else(|| {
            panic!("{dockerfile} builds package {package}, which the workspace does not have")
        });
        assert!(
            bins.iter().any(|b| b == binary),
            "{dockerfile}: package {package} has no binary {binary} ({bins:?})"
        );
        if let Some(bin) = after(&text, "--bin ") {
            assert_eq!(bin, binary, "{dockerfile}");
        }
        assert!(text.contains("--locked"), "{dockerfile}: build with --locked");
        assert!(text.contains(&format!("/out/{binary} /{binary}")), "{dockerfile}: copies /{binary}");
        assert!(text.contains(&format!("ENTRYPOINT [\"/{binary}\"]")), "{dockerfile}: entrypoint /{binary}");
        assert!(text.contains("\nUSER 65532:65532\n"), "{dockerfile}: numeric non-root user");
        assert!(text.contains("distroless"), "{dockerfile}: a minimal final image");
        assert!(text.contains(&format!("-t {chart_repository}:dev")), "{dockerfile}: documented tag");
        assert!(
            values.contains(&format!("repository: {chart_repository}\n    tag: dev")),
            "chart values use {chart_repository}:dev"
        );
    }
}

#[test]
fn the_makefile_builds_exactly_the_images_that_have_dockerfiles() {
    let makefile = std::fs::read_to_string(repo_root().join("Makefile")).unwrap();
    let images: Vec<&str> = makefile
        .lines()
        .find_map(|line| line.strip_prefix("IMAGES = "))
        .expect("an IMAGES line")
        .split_whitespace()
        .collect();
    assert_eq!(images, ["miner", "operator", "mcp-frontend"]);
    for image in images {
        assert!(repo_root().join(image).join("Dockerfile").exists(), "{image}/Dockerfile");
    }
}
