//! The seven images users run (the example tools' among them), as `make images BINARIES=prebuilt` built them
//! into podman's store (tests/run.sh does, before these tests): each runs as
//! UID 65532 with a read-only root, no capabilities and no network, its config
//! says what the chart relies on, and it holds nothing but its binary.

use std::process::{Command, Output};

use cluster_tests::repo_root;
use serde_json::Value;

const TAG: &str = "dev";

/// (image, binary, a command that must exit 0 and what it prints, ports the chart's Pods declare)
const IMAGES: [(&str, &str, &str, &[u16]); 7] = [
    ("miner", "/miner", "--version", &[]),
    ("operator", "/operator", "--help", &[8081, 8082]),
    ("mcp-frontend", "/mcp-frontend", "--help", &[8080, 9090]),
    ("sum-numbers", "/sum-numbers", "--version", &[]),
    ("deploy-gate", "/deploy-gate", "--version", &[]),
    ("report", "/report", "--version", &[]),
    ("mcp-fixtures", "/mcp-fixtures", "--version", &[]),
];

fn reference(image: &str) -> String {
    format!("localhost/mining-operator/{image}:{TAG}")
}

/// podman as this machine's sandbox needs it: cgroupfs, runc.
fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(["--cgroup-manager=cgroupfs", "--runtime", "runc"])
        .args(args)
        .output()
        .expect("podman runs (tests/run.sh installs it)")
}

fn inspect(image: &str) -> Value {
    let output = podman(&["image", "inspect", "--format", "json", &reference(image)]);
    assert!(
        output.status.success(),
        "{} is not in podman's store; build it with `make images BINARIES=prebuilt ENGINE=podman`: {}",
        reference(image),
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: Value = serde_json::from_slice(&output.stdout).unwrap();
    parsed[0].clone()
}

/// `podman run` as the restricted Pod Security profile runs a container.
fn run_restricted(image: &str, extra: &[&str], args: &[&str]) -> Output {
    let reference = reference(image);
    let mut argv = vec![
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--user",
        "65532:65532",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
    ];
    argv.extend_from_slice(extra);
    argv.push(&reference);
    argv.extend_from_slice(args);
    podman(&argv)
}

#[test]
#[ignore = "checks the images podman built here; tests/run.sh runs it on the local cluster"]
fn each_image_runs_as_65532_with_a_read_only_root_and_no_capabilities() {
    for (image, binary, check, _) in IMAGES {
        let output = run_restricted(image, &[], &[check]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{image} {check}: {:?}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let name = binary.trim_start_matches('/');
        assert!(stdout.contains(name) || stdout.contains("Usage"), "{image} {check} printed {stdout}");
    }
}

#[test]
#[ignore = "checks the images podman built here; tests/run.sh runs it on the local cluster"]
fn the_miner_image_mines_what_the_host_binary_mines() {
    let args = ["chain", "--blocks", "3", "--difficulty", "12"];
    let output = run_restricted("miner", &[], &args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let host = Command::new(cluster_tests::mcp::release_binary("miner")).args(args).output().unwrap();
    assert!(host.status.success());
    // Every field but the time each block took.
    let blocks = |stdout: &[u8]| -> Vec<Value> {
        String::from_utf8_lossy(stdout)
            .lines()
            .map(|line| {
                let mut block: Value = serde_json::from_str(line).unwrap();
                block.as_object_mut().unwrap().remove("elapsed_ms");
                block
            })
            .collect()
    };
    let mined = blocks(&output.stdout);
    assert_eq!(mined.len(), 3);
    assert_eq!(mined, blocks(&host.stdout));
}

#[test]
#[ignore = "checks the images podman built here; tests/run.sh runs it on the local cluster"]
fn each_image_config_is_what_the_chart_expects_and_holds_only_its_binary() {
    let values = std::fs::read_to_string(repo_root().join("charts/mining-operator/values.yaml")).unwrap();
    for (image, binary, _, ports) in IMAGES {
        let inspected = inspect(image);
        let config = &inspected["Config"];
        assert_eq!(
            config["User"], "65532:65532",
            "{image}: numeric non-root user (runAsNonRoot verifies it)"
        );
        assert_eq!(config["Entrypoint"], serde_json::json!([binary]), "{image}: entrypoint");
        let mut exposed: Vec<u16> = config["ExposedPorts"]
            .as_object()
            .map(|ports| ports.keys().filter_map(|p| p.trim_end_matches("/tcp").parse().ok()).collect())
            .unwrap_or_default();
        exposed.sort();
        assert_eq!(exposed, ports, "{image}: exposed ports are the chart's containerPorts");
        // The example tools are no images of the chart: an McpTool names each.
        // The chart names them by imageRegistry (localhost), repository and
        // its appVersion, which `make images` tags beside TAG.
        assert!(
            matches!(image, "sum-numbers" | "deploy-gate" | "report" | "mcp-fixtures")
                || (values.contains(&format!("repository: mining-operator/{image}\n"))
                    && values.contains("\nimageRegistry: localhost\n")),
            "chart values use localhost/mining-operator/{image}"
        );
        let versioned = format!("localhost/mining-operator/{image}:{}", env!("CARGO_PKG_VERSION"));
        let tagged = podman(&["image", "inspect", "--format", "{{.Id}}", &versioned]);
        assert!(tagged.status.success(), "{versioned} is built: {}", String::from_utf8_lossy(&tagged.stderr));
        assert_eq!(
            String::from_utf8_lossy(&tagged.stdout).trim(),
            inspected["Id"].as_str().unwrap_or_default(),
            "{versioned} is the {TAG} image"
        );
        // One layer, one file: the image's root is its binary and nothing else.
        let layers = inspected["RootFS"]["Layers"].as_array().map_or(0, Vec::len);
        assert_eq!(layers, 1, "{image}: one layer");
        let listing = run_restricted(image, &["--entrypoint", "/bin/sh"], &["-c", "true"]);
        assert!(!listing.status.success(), "{image}: has no shell");
        let size = inspected["Size"].as_u64().unwrap_or(u64::MAX);
        assert!(size < 32 << 20, "{image}: {size} bytes; a static binary is far smaller");
    }
}

#[test]
#[ignore = "checks the images podman built here; tests/run.sh runs it on the local cluster"]
fn the_makefile_builds_exactly_the_images_the_containerfile_has() {
    let makefile = std::fs::read_to_string(repo_root().join("Makefile")).unwrap();
    let images: Vec<&str> = makefile
        .lines()
        .find_map(|line| line.strip_prefix("IMAGES = "))
        .expect("an IMAGES line")
        .split_whitespace()
        .collect();
    assert_eq!(images, IMAGES.map(|(image, ..)| image));
    let containerfile = std::fs::read_to_string(repo_root().join("Containerfile")).unwrap();
    let compiled = containerfile.split("AS compiled\n").nth(1).expect("one compiled stage");
    assert!(compiled.contains("--locked"), "the compiled stage builds with --locked");
    for image in images {
        let stage = containerfile
            .split(&format!("FROM scratch AS {image}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("a stage for {image}"));
        let stage = stage.split("\nFROM ").next().unwrap();
        assert!(
            stage.contains(&format!("COPY --from=binaries /out/{image} /{image}\n")),
            "{image}: nothing but its binary"
        );
        assert!(
            compiled.contains(&format!("-p {}", if image == "operator" { "mining-operator" } else { image })),
            "the one compiled stage builds {image}"
        );
    }
}

#[test]
#[ignore = "checks the images podman built here; tests/run.sh runs it on the local cluster"]
fn the_example_tool_image_reads_its_arguments_as_data() {
    let shell = "$(id); rm -rf / `reboot`";
    let arguments = serde_json::json!({"numbers": [1, 2.5], "label": shell}).to_string();
    let env = format!("MCP_TOOL_ARGUMENTS={arguments}");
    let output = run_restricted("sum-numbers", &["--env", &env], &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result, serde_json::json!({"sum": 3.5, "count": 2, "label": shell}));
    let failed = run_restricted("sum-numbers", &["--env", "MCP_TOOL_ARGUMENTS={\"fail\":\"boom\"}"], &[]);
    assert_eq!(failed.status.code(), Some(3), "{}", String::from_utf8_lossy(&failed.stdout));
}
