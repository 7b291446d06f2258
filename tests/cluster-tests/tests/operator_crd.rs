//! The generated CRD as the real API server sees it.

use cluster_tests::{TestNamespace, install_crd};
use kube::api::{Api, PostParams};
use mining_api::MiningWorkflow;
use serde_json::json;

#[tokio::test]
async fn the_api_server_accepts_the_crd_and_rejects_out_of_range_specs() {
    let ns = TestNamespace::new("crd").await;
    install_crd(&ns.client).await;
    let workflows: Api<MiningWorkflow> = ns.api();
    let create = |spec: serde_json::Value| {
        let workflows = workflows.clone();
        async move {
            let body: MiningWorkflow = serde_json::from_value(json!({
                "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
                "metadata": {"name": "w"}, "spec": spec,
            }))
            .unwrap();
            workflows.create(&PostParams { dry_run: true, ..Default::default() }, &body).await
        }
    };
    let accepted = create(json!({"difficulty": 8})).await.expect("a valid spec is accepted");
    assert_eq!(accepted.spec.blocks, mining_api::bounds::DEFAULT_BLOCKS, "the server applies the default");

    for (spec, field) in [
        (json!({"difficulty": 0}), "spec.difficulty"),
        (json!({"difficulty": 65}), "spec.difficulty"),
        (json!({"difficulty": 8, "blocks": 0}), "spec.blocks"),
        (json!({"difficulty": 8, "blocks": 65}), "spec.blocks"),
    ] {
        let err = create(spec.clone()).await.expect_err("out of range");
        let kube::Error::Api(status) = err else { panic!("{spec}: not an API error: {err}") };
        assert_eq!(status.code, 422, "{spec}");
        assert!(status.message.contains(field), "{spec}: {}", status.message);
    }
}

/// crds/ read by a YAML 1.1 reader (PyYAML, as the Python client's
/// `create_from_yaml` and Ansible read them): every bound is a number, not a
/// string, and no field declares a format current API servers warn about.
#[test]
fn the_crds_read_the_same_in_a_yaml_1_1_reader() {
    let script = r#"
import glob, sys, yaml
problems, bounds = [], 0
def walk(node, path):
    global bounds
    if isinstance(node, dict):
        for key in ("minimum", "maximum"):
            if key in node and not isinstance(node[key], dict):
                bounds += 1
                if not isinstance(node[key], (int, float)) or isinstance(node[key], bool):
                    problems.append(f"{path}.{key} = {node[key]!r}")
        if isinstance(node.get("format"), str) and node["format"].startswith("uint"):
            problems.append(f"{path}.format = {node['format']}")
        for key, value in node.items():
            walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            walk(value, f"{path}[{index}]")
for file in sorted(glob.glob(sys.argv[1] + "/crds/*.yaml")):
    walk(yaml.safe_load(open(file)), file)
print(bounds)
print("\n".join(problems))
"#;
    let root = cluster_tests::repo_root();
    let output = std::process::Command::new("python3").arg("-c").arg(script).arg(&root).output().unwrap();
    assert!(
        output.status.success(),
        "PyYAML (Debian's python3-yaml) reads crds/: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    let mut lines = printed.lines();
    let bounds: u32 = lines.next().unwrap().parse().unwrap();
    assert!(bounds > 20, "the walk saw the bounds: {bounds}");
    let problems: Vec<&str> = lines.filter(|line| !line.is_empty()).collect();
    assert!(problems.is_empty(), "{problems:#?}");
}
