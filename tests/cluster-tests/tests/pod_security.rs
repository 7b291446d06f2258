//! Every McpTool the docs, the demo and the examples print makes Pods that
//! pass Pod Security "restricted" (1.30+) once the operator completed its
//! template, and so does every miner Job; checked with the profile's
//! controls as a table (`cluster_tests::pod_security`: no maintained
//! checker is in the registries here, and the local 1.20 API server has no
//! Pod Security admission), whose own fixtures — the profile's documented
//! allowed and refused values, control by control — show it can say no.

use std::path::Path;

use cluster_tests::pod_security::{RESTRICTED, restricted_violations};
use cluster_tests::repo_root;
use k8s_openapi::api::core::v1::PodSpec;
use mining_api::McpTool;
use serde_json::{Value, json};

/// A Pod that passes every control: the profile's own minimal example.
fn passing() -> Value {
    json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": "app",
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
    })
}

fn pod(with: Value) -> PodSpec {
    let mut spec = passing();
    merge(&mut spec, with);
    serde_json::from_value(spec).unwrap()
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (Value::Array(into), Value::Array(from)) if into.len() == from.len() => {
            for (into, from) in into.iter_mut().zip(from) {
                merge(into, from);
            }
        }
        (into, from) => *into = from,
    }
}

fn container(context: Value) -> Value {
    json!({"containers": [{"securityContext": context}]})
}

#[test]
fn the_profiles_documented_values_are_allowed_or_refused_control_by_control() {
    assert!(
        restricted_violations(&pod(json!({}))).is_empty(),
        "{:?}",
        restricted_violations(&pod(json!({})))
    );
    // (the control that must refuse it, a Pod that breaks it)
    let refused: Vec<(&str, Value)> = vec![
        ("HostProcess", container(json!({"windowsOptions": {"hostProcess": true}}))),
        ("Host Namespaces", json!({"hostNetwork": true})),
        ("Host Namespaces", json!({"hostPID": true})),
        ("Host Namespaces", json!({"hostIPC": true})),
        ("Privileged Containers", container(json!({"privileged": true}))),
        ("Capabilities (baseline)", container(json!({"capabilities": {"add": ["SYS_ADMIN"]}}))),
        ("HostPath Volumes", json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]})),
        ("Host Ports", json!({"containers": [{"ports": [{"containerPort": 80, "hostPort": 80}]}]})),
        ("AppArmor", container(json!({"appArmorProfile": {"type": "Unconfined"}}))),
        ("SELinux", container(json!({"seLinuxOptions": {"type": "spc_t"}}))),
        ("SELinux", container(json!({"seLinuxOptions": {"user": "root"}}))),
        ("/proc Mount Type", container(json!({"procMount": "Unmasked"}))),
        ("Seccomp (baseline)", json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}})),
        ("Sysctls", json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}})),
        ("Volume Types", json!({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]})),
        ("Privilege Escalation", container(json!({"allowPrivilegeEscalation": true}))),
        (
            "Privilege Escalation",
            json!({"containers": [{"securityContext": {"allowPrivilegeEscalation": null}}]}),
        ),
        ("Running as Non-root", json!({"securityContext": {"runAsNonRoot": false}})),
        ("Running as Non-root", container(json!({"runAsNonRoot": false}))),
        ("Running as Non-root user", json!({"securityContext": {"runAsUser": 0}})),
        ("Seccomp (restricted)", json!({"securityContext": {"seccompProfile": null}})),
        ("Capabilities (restricted)", container(json!({"capabilities": {"drop": ["NET_RAW"]}}))),
        (
            "Capabilities (restricted)",
            container(json!({"capabilities": {"add": ["CHOWN"], "drop": ["ALL"]}})),
        ),
    ];
    for (control, broken) in refused {
        let violations = restricted_violations(&pod(broken.clone()));
        assert!(
            violations.iter().any(|v| v.starts_with(control) || v.contains(control)),
            "{control}: {broken} gave {violations:?}"
        );
    }
    let allowed: Vec<Value> = vec![
        container(json!({"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}})),
        container(json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}})),
        container(json!({"seLinuxOptions": {"type": "container_init_t", "level": "s0:c1"}})),
        json!({"securityContext": {"sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}]}}),
        json!({"volumes": [{"name": "c", "configMap": {"name": "c"}}, {"name": "e", "emptyDir": {}},
                           {"name": "s", "secret": {"secretName": "s"}}, {"name": "p", "projected": {"sources": []}}]}),
        // runAsNonRoot in every container instead of the Pod.
        json!({"securityContext": {"runAsNonRoot": null}, "containers": [{"securityContext": {"runAsNonRoot": true}}]}),
        json!({"securityContext": {"runAsUser": 1000}}),
    ];
    for fine in allowed {
        assert!(
            restricted_violations(&pod(fine.clone())).is_empty(),
            "{fine}: {:?}",
            restricted_violations(&pod(fine.clone()))
        );
    }
    assert_eq!(RESTRICTED.len(), 16);
}

/// Every McpTool document in `text` (YAML, one or more documents).
fn tools_in(text: &str) -> Vec<McpTool> {
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|document| {
            let value: Value = serde::Deserialize::deserialize(document).ok()?;
            (value["kind"] == "McpTool").then(|| serde_json::from_value(value).expect("a valid McpTool"))
        })
        .collect()
}

fn printed_tools() -> Vec<(String, McpTool)> {
    let root = repo_root();
    let mut found = Vec::new();
    let mut markdown: Vec<String> = vec!["README.md".into()];
    let docs = std::fs::read_dir(root.join("docs")).unwrap();
    markdown.extend(
        docs.flatten()
            .map(|e| format!("docs/{}", e.file_name().to_string_lossy()))
            .filter(|f| f.ends_with(".md")),
    );
    for file in markdown {
        for block in cluster_tests::docs::all_blocks(&file, "yaml") {
            found.extend(tools_in(&block).into_iter().map(|tool| (file.clone(), tool)));
        }
    }
    let mut yaml_files = Vec::new();
    for dir in ["demo", "examples"] {
        collect_yaml(&root.join(dir), &mut yaml_files);
    }
    for path in yaml_files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        found.extend(tools_in(&text).into_iter().map(|tool| (name.clone(), tool)));
    }
    // The conformance suite's fixtures, which the tests run as McpTools.
    let fixtures = "tests/mcp-clients/fixtures.yaml".to_string();
    found.extend(
        cluster_tests::tools::conformance_fixtures().into_iter().map(|tool| (fixtures.clone(), tool)),
    );
    found
}

fn collect_yaml(dir: &Path, into: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.ends_with("target") {
            collect_yaml(&path, into);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            into.push(path);
        }
    }
}

#[test]
fn every_printed_tool_and_every_miner_job_passes_restricted_after_the_operators_defaults() {
    let tools = printed_tools();
    let sources: std::collections::BTreeSet<&str> = tools.iter().map(|(file, _)| file.as_str()).collect();
    for expected in
        ["demo/sum-numbers.yaml", "demo/deploy-gate.yaml", "docs/TOOLS.md", "tests/mcp-clients/fixtures.yaml"]
    {
        assert!(sources.contains(expected), "no McpTool found in {expected}: {sources:?}");
    }
    for (file, tool) in &tools {
        // A call of the tool: its template, as the frontend snapshots it.
        let mut run =
            mining_api::testing::tool_run("mw-check", tool.metadata.name.as_deref().unwrap_or("tool"));
        run.spec.job_template = tool.spec.job_template.clone();
        let job = mining_operator::tool_run::job::job_for_run(&run, None).expect("a Job for the tool");
        let pod = job.spec.unwrap().template.spec.unwrap();
        let violations = restricted_violations(&pod);
        assert!(
            violations.is_empty(),
            "{file}: McpTool {:?} breaks restricted: {violations:?}",
            tool.metadata.name
        );
    }
    // The miner's Job, as the operator builds it with its defaults.
    let config = <mining_operator::config::Config as clap::Parser>::parse_from(["operator"]);
    let settings = mining_operator::mining::job::MinerSettings {
        image: &config.miner_image,
        image_pull_policy: &config.miner_image_pull_policy,
        pull_secrets: &[],
        threads: 1,
        job: &config.job,
        otlp: None,
    };
    let mut workflow = MiningWorkflowBuilder::workflow();
    workflow.metadata.uid = Some("uid".into());
    let job = mining_operator::mining::job::build_block_job(&workflow, 1, mining_api::GENESIS, 8, &settings);
    let violations = restricted_violations(&job.spec.unwrap().template.spec.unwrap());
    assert!(violations.is_empty(), "the miner's Job: {violations:?}");
}

struct MiningWorkflowBuilder;

impl MiningWorkflowBuilder {
    fn workflow() -> mining_api::MiningWorkflow {
        serde_json::from_value(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": "w", "namespace": "mining-workflows"},
            "spec": {"difficulty": 8, "blocks": 1},
        }))
        .unwrap()
    }
}
