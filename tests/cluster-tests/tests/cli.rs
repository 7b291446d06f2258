//! `kubectl mining` (the release binary `kubectl-mining`, as a user runs it)
//! against the real control plane: it lists and shows a run waiting for its
//! caller's answer with the question, a finished run's files, follows a
//! workflow to its end line by line with the right exit code, prints its
//! Pods' logs, cancels, and validates a broken McpTool with the very
//! message the frontend writes into that tool's `Accepted` condition.

use std::process::Command;
use std::time::Duration;

use cluster_tests::mcp::{Sdk, release_binary};
use cluster_tests::tools::{
    ALICE, call, define, deploy_gate, report_tool, settle, setup_with_args, setup_with_embedded_store,
};
use cluster_tests::{TestNamespace, as_a_user, eventually, kubectl_with_input, repo_root};
use kube::api::{Api, PostParams};
use mining_api::{McpTool, MiningWorkflow, MiningWorkflowSpec, ToolRun, WorkflowPhase};
use serde_json::json;

/// Runs `kubectl-mining ARGS -n NS` with the suite's KUBECONFIG (as a user's
/// shell would have it); its exit code and output.
fn cli(ns: &TestNamespace, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(release_binary("kubectl-mining"))
        .current_dir(repo_root())
        .args(args)
        .args(["-n", &ns.name])
        .output()
        .expect("kubectl-mining runs");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// Like [`cli`], failing the test unless it exits 0.
fn cli_ok(ns: &TestNamespace, args: &[&str]) -> String {
    let (code, stdout, stderr) = cli(ns, args);
    assert_eq!(code, 0, "kubectl-mining {args:?}: {stdout}{stderr}");
    stdout
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `kubectl mining` lines of README's "Follow runs from the command
/// line", without `kubectl mining` and comments.
fn readme_commands() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = readme.split("## Follow runs from the command line").nth(1).expect("the section");
    let block = section.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("its sh block");
    let commands: Vec<Vec<String>> = block
        .lines()
        .filter_map(|line| line.split('#').next()?.trim().strip_prefix("kubectl mining "))
        .map(|args| args.split_whitespace().map(str::to_string).collect())
        .collect();
    assert!(commands.len() >= 6, "{block}");
    commands
}

#[tokio::test]
#[ignore = "needs a cluster and the images (tests/run.sh)"]
async fn the_cli_shows_a_waiting_run_a_runs_files_follows_a_workflow_and_prints_its_logs() {
    let (ns, _operator, frontend, store) = setup_with_embedded_store("cli", &[]).await;
    let url = frontend.url();

    // A run waiting for its caller: the question is on show and in the list.
    define(&ns, &url, deploy_gate(20)).await;
    let asked =
        call(Sdk::Python, &url, ALICE, "deploy-gate", json!({"service": "api", "version": "1.2"})).await;
    let asked = if asked["status"] == "running" {
        settle(Sdk::Python, &url, ALICE, asked["workflow_id"].as_str().unwrap()).await
    } else {
        asked
    };
    assert_eq!(asked["status"], "input_required", "{asked:#}");
    let waiting = asked["workflow_id"].as_str().unwrap().to_string();
    let shown = cli_ok(&ns, &["show", &waiting]);
    for expected in
        ["ToolRun (deploy-gate)", "InputRequired (1 asked)", "approve", "elicitation", "Deploy api 1.2"]
    {
        assert!(shown.contains(expected), "{expected} in:\n{shown}");
    }
    let listed = cli_ok(&ns, &["list"]);
    let row = listed.lines().find(|line| line.contains(&waiting)).unwrap_or_else(|| panic!("{listed}"));
    assert!(row.starts_with("toolrun") && row.contains("InputRequired (1 asked)"), "{listed}");
    let as_json: serde_json::Value = serde_json::from_str(&cli_ok(&ns, &["list", "-o", "json"])).unwrap();
    assert_eq!(as_json["items"][0]["questions"], json!(["approve"]), "{as_json:#}");

    // A finished run's files, as the operator recorded them.
    define(&ns, &url, report_tool()).await;
    let started = call(Sdk::TypeScript, &url, ALICE, "report", json!({"rows": 1000})).await;
    let report = started["workflow_id"].as_str().unwrap().to_string();
    let done = settle(Sdk::TypeScript, &url, ALICE, &report).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    let stored = ns.api::<ToolRun>().get(&report).await.unwrap().status.unwrap().outputs;
    assert_eq!(stored.len(), 2);
    let shown = cli_ok(&ns, &["show", &format!("toolrun/{report}")]);
    assert!(shown.contains("Succeeded"), "{shown}");
    for output in &stored {
        let line = shown
            .lines()
            .find(|l| l.trim_start().starts_with(&output.name))
            .unwrap_or_else(|| panic!("{shown}"));
        assert!(line.contains(&output.media_type) && line.contains(&output.sha256), "{line}");
    }
    let yaml = cli_ok(&ns, &["show", &report, "-o", "yaml"]);
    assert!(yaml.contains("kind: ToolRun") && yaml.contains(&stored[0].sha256), "{yaml}");

    // A workflow followed to its end (a line per change without a terminal).
    let workflows: Api<MiningWorkflow> = ns.api();
    let spec = MiningWorkflowSpec { blocks: 3, ..MiningWorkflowSpec::new(14) };
    workflows.create(&PostParams::default(), &MiningWorkflow::new("chain", spec)).await.unwrap();
    let (code, followed, stderr) = cli(&ns, &["watch", "mwf/chain", "--timeout", "120"]);
    assert_eq!(code, 0, "{followed}{stderr}");
    let lines: Vec<&str> = followed.lines().collect();
    assert!(lines.last().is_some_and(|l| l.starts_with("mwf/chain Succeeded 3/3")), "{followed}");
    assert!(lines.len() >= 2 && lines[0].starts_with("mwf/chain "), "a line per change: {followed}");
    let progress: Vec<u32> =
        lines.iter().filter_map(|l| l.rsplit(' ').next()?.split('/').next()?.parse().ok()).collect();
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "progress never goes back: {followed}");

    // Its Pods' logs, each line prefixed with its Pod and container.
    let logs = cli_ok(&ns, &["logs", "mwf/chain"]);
    for block in 1..=3 {
        assert!(
            logs.lines().any(|l| l.starts_with('[') && l.contains(&format!("] miner: block={block} "))),
            "block {block}'s miner line in:\n{logs}"
        );
    }
    // Followed from before its first Pod: each block's Pod as it comes,
    // until the workflow ends (before, `-f` read only the Pods there were
    // when it started, here none, and stopped).
    let spec = MiningWorkflowSpec { blocks: 3, ..MiningWorkflowSpec::new(14) };
    workflows.create(&PostParams::default(), &MiningWorkflow::new("followed", spec)).await.unwrap();
    let following = tokio::process::Command::new(release_binary("kubectl-mining"))
        .current_dir(repo_root())
        .args(["logs", "-f", "mwf/followed", "-n", &ns.name])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), following)
        .await
        .expect("logs -f ends when the workflow has")
        .expect("kubectl-mining runs");
    let followed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{followed}{}", String::from_utf8_lossy(&output.stderr));
    for block in 1..=3 {
        assert!(
            followed.lines().any(|l| l.starts_with('[') && l.contains(&format!("] miner: block={block} "))),
            "block {block}'s miner line, followed:\n{followed}"
        );
    }
    assert_eq!(workflows.get("followed").await.unwrap().phase(), WorkflowPhase::Succeeded);
    let shown = cli_ok(&ns, &["show", "mwf/chain"]);
    assert_eq!(shown.matches("Complete").count(), 3, "three Jobs, each complete:\n{shown}");
    // A namespace editor plants a Job with the workflow's label and a
    // controller ownerReference naming its uid: it is not the workflow's.
    let uid = workflows.get("chain").await.unwrap().metadata.uid.unwrap();
    let planted: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "chain-planted", "labels": {mining_api::labels::WORKFLOW: "chain"},
            "ownerReferences": [{"apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
                "name": "chain", "uid": uid, "controller": true}]},
        // No Pod: parallelism 0.
        "spec": {"parallelism": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "localhost/mining-operator/miner:dev"}]}}},
    }))
    .unwrap();
    ns.api::<k8s_openapi::api::batch::v1::Job>().create(&PostParams::default(), &planted).await.unwrap();
    let shown = cli_ok(&ns, &["show", "mwf/chain"]);
    assert!(!shown.contains("chain-planted"), "the planted Job shows as the workflow's:\n{shown}");
    assert_eq!(shown.matches("Complete").count(), 3, "{shown}");
    // ...and a Pod naming one of its real Jobs as controller, with that
    // Job's labels, running the miner on another block: neither `show` nor
    // `logs` takes it for the workflow's (before, a controller reference
    // was enough, so its forged line printed as the workflow's own).
    let chain_jobs = ns
        .api::<k8s_openapi::api::batch::v1::Job>()
        .list(&kube::api::ListParams::default().labels(&format!("{}=chain", mining_api::labels::WORKFLOW)))
        .await
        .unwrap();
    let job =
        chain_jobs.items.iter().find(|job| job.metadata.name.as_deref() != Some("chain-planted")).unwrap();
    let template = job.spec.clone().unwrap().template;
    let mut spec = template.spec.unwrap();
    let args = spec.containers[0].args.as_mut().unwrap();
    let index = args.iter().position(|arg| arg == "--index").unwrap() + 1;
    args[index] = "9".into();
    let planted_pod = k8s_openapi::api::core::v1::Pod {
        metadata: kube::api::ObjectMeta {
            name: Some("chain-planted-pod".into()),
            labels: template.metadata.and_then(|m| m.labels),
            owner_references: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: job.metadata.name.clone().unwrap(),
                uid: job.metadata.uid.clone().unwrap(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        ..Default::default()
    };
    let pods = ns.api::<k8s_openapi::api::core::v1::Pod>();
    pods.create(&PostParams::default(), &planted_pod).await.unwrap();
    eventually("the planted Pod to print its forged block", Duration::from_secs(60), || async {
        let phase = pods.get("chain-planted-pod").await.ok()?.status?.phase?;
        (phase == "Succeeded" || phase == "Failed").then_some(())
    })
    .await;
    let forged = pods.logs("chain-planted-pod", &Default::default()).await.unwrap();
    assert!(forged.contains("block=9 "), "the planted Pod ran the miner on block 9: {forged}");
    let shown = cli_ok(&ns, &["show", "mwf/chain"]);
    assert!(!shown.contains("chain-planted-pod"), "the planted Pod shows as the workflow's:\n{shown}");
    let logs = cli_ok(&ns, &["logs", "mwf/chain"]);
    assert!(!logs.contains("block=9 "), "the planted Pod's line prints as the workflow's:\n{logs}");
    assert!(logs.contains("] miner: block=3 "), "the workflow's own lines still print:\n{logs}");

    // Cancel: a workflow of many hard blocks stops; a finished one is left as it is.
    let spec = MiningWorkflowSpec { blocks: 40, ..MiningWorkflowSpec::new(32) };
    workflows.create(&PostParams::default(), &MiningWorkflow::new("long", spec)).await.unwrap();
    let said = cli_ok(&ns, &["cancel", "mwf/long"]);
    assert!(said.contains("cancel requested"), "{said}");
    let (code, followed, _) = cli(&ns, &["watch", "mwf/long", "--timeout", "60"]);
    assert_eq!(code, 1, "a cancelled workflow did not succeed: {followed}");
    assert!(followed.lines().last().is_some_and(|l| l.starts_with("mwf/long Cancelled 0/40")), "{followed}");
    assert_eq!(workflows.get("long").await.unwrap().phase(), WorkflowPhase::Cancelled);
    assert!(cli_ok(&ns, &["cancel", "mwf/chain"]).contains("already ended: Succeeded"));

    // README's block, as printed (but `cargo install`: the suite built the
    // binary): RUN is the waiting run, which its last line cancels.
    for args in readme_commands() {
        let args: Vec<&str> = args
            .iter()
            .map(|arg| match arg.as_str() {
                "RUN" => waiting.as_str(),
                "mwf/NAME" => "mwf/chain",
                other => other,
            })
            .collect();
        let said = cli_ok(&ns, &args);
        if args[0] == "validate" {
            assert!(said.contains("mcptool/sum-numbers: valid"), "{said}");
        }
    }
    eventually("README's cancel to end the waiting run", Duration::from_secs(30), || async {
        let run = ns.api::<ToolRun>().get(&waiting).await.ok()?;
        (run.phase() == mining_api::ToolRunPhase::Cancelled).then_some(())
    })
    .await;

    // Names it does not know are errors that say so.
    let (code, _, stderr) = cli(&ns, &["show", "mwf/nothing"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no workflow or tool run nothing"), "{stderr}");
    let _ = std::fs::remove_dir_all(&store);
}

#[tokio::test]
#[ignore = "needs a cluster (tests/run.sh)"]
async fn validate_gives_the_verdict_the_frontend_writes_into_the_tool() {
    let (ns, _operator, frontend) = setup_with_args("cli-validate", &[], &[]).await;
    // Applies (the API server takes it) but cannot be offered: an unusable schema.
    let broken = r#"apiVersion: mining-operator.dev/v1alpha1
kind: McpTool
metadata:
  name: broken-sum
spec:
  description: Adds numbers.
  inputSchema:
    type: object
    properties:
      numbers: {type: array, minItems: many}
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: tool, image: localhost/mining-operator/sum-numbers:dev}]
"#;
    let dir = tempdir("validate");
    let file = dir.join("broken.yaml");
    std::fs::write(&file, broken).unwrap();
    let (code, said, stderr) = cli(&ns, &["validate", "-f", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{said}{stderr}");
    let applied = kubectl_with_input(&["apply", "-n", &ns.name, "-f", "-"], broken);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let tools: Api<McpTool> = ns.api();
    let written = eventually("the frontend's verdict on the tool", Duration::from_secs(30), || async {
        let tool = tools.get("broken-sum").await.ok()?;
        let accepted = tool.status?.conditions.into_iter().find(|c| c.type_ == "Accepted")?;
        (accepted.status == mining_api::ConditionStatus::False).then_some(accepted.message)
    })
    .await;
    assert!(written.starts_with("inputSchema is not a usable JSON Schema"), "{written}");
    assert_eq!(
        said.trim_end(),
        format!("{}: mcptool/broken-sum: invalid: {written}", file.display()),
        "the CLI says what the frontend wrote"
    );
    // The fixed definition passes, and the frontend then offers it.
    let fixed = broken.replace("minItems: many", "minItems: 1");
    std::fs::write(&file, &fixed).unwrap();
    let said = cli_ok(&ns, &["validate", "-f", file.to_str().unwrap()]);
    assert!(said.contains("mcptool/broken-sum: valid"), "{said}");
    // Every whole McpTool the docs print passes, and the API server takes it.
    let documented: Vec<String> = ["README.md", "docs/TOOLS.md"]
        .iter()
        .flat_map(|file| cluster_tests::docs::all_blocks(file, "yaml"))
        .filter(|block| block.contains("kind: McpTool"))
        .map(|block| block.replace("namespace: mining-workflows", &format!("namespace: {}", ns.name)))
        .collect();
    assert!(documented.len() >= 4, "the docs' tools: {documented:#?}");
    for (index, block) in documented.iter().enumerate() {
        let file = dir.join(format!("documented-{index}.yaml"));
        std::fs::write(&file, block).unwrap();
        let said = cli_ok(&ns, &["validate", "-f", file.to_str().unwrap()]);
        assert!(said.contains(": valid ("), "{said}\n{block}");
        let checked = kubectl_with_input(&["create", "--dry-run=server", "-n", &ns.name, "-f", "-"], block);
        assert!(checked.status.success(), "{block}: {}", String::from_utf8_lossy(&checked.stderr));
    }
    drop(frontend);
    let _ = std::fs::remove_dir_all(&dir);
}

/// README's install line, as written (into a scratch root instead of
/// ~/.cargo): it builds in the workspace's target directory, where
/// tests/run.sh built the CLI the same way, so it installs what the tests
/// ran, and the installed binary answers as `kubectl mining`.
#[test]
fn readmes_cargo_install_line_installs_the_cli() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = readme.split("## Follow runs from the command line").nth(1).expect("the section");
    let line = section
        .lines()
        .find_map(|line| line.split('#').next()?.trim().strip_prefix("cargo install "))
        .expect("README's cargo install line");
    let root = tempdir("install");
    // The target directory the tests were built in (CARGO_TARGET_DIR, or the workspace's).
    let built = release_binary("kubectl-mining");
    let target_dir = built.parent().and_then(|release| release.parent()).expect("the target directory");
    // As a user types it: from the test runner's environment cargo would
    // rebuild the shared TLS crates (see `as_a_user`).
    let installed = as_a_user(&mut Command::new("cargo"))
        .current_dir(repo_root())
        .arg("install")
        .args(line.split_whitespace())
        .args(["--root", root.to_str().unwrap(), "--offline"])
        .env("CARGO_TARGET_DIR", target_dir)
        .output()
        .expect("cargo runs");
    let said = String::from_utf8_lossy(&installed.stderr);
    assert!(installed.status.success(), "cargo install {line}: {said}");
    let binary = root.join("bin").join("kubectl-mining");
    let help = Command::new(&binary).arg("--help").output().expect("the installed CLI runs");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success() && text.contains("Usage: kubectl-mining"), "{text}");
    for command in ["list", "show", "watch", "logs", "cancel", "validate"] {
        assert!(text.contains(command), "{command} in:\n{text}");
    }
    let _ = std::fs::remove_dir_all(root);
}
