//! Results beyond 4 KiB, on the real control plane: the example `report`
//! tool (image `mining-operator/report`) uploads a 16 MiB CSV and a small
//! SVG while it runs; the caller gets both as `resource_link`s and reads
//! them through `resources/read` with clients this project did not write
//! (the official TypeScript and Python SDKs), byte for byte; another caller
//! reads nothing; the files go when the run expires. Once with the embedded
//! store (a directory of the operator), once with an S3 API server (s3s-fs,
//! installed from crates.io by tests/run.sh).

use std::path::{Path, PathBuf};
use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, Sdk};
use cluster_tests::s3::S3Server;
use cluster_tests::tools::{ALICE, BOB, call, define, report_tool, settle, setup_with_embedded_store};
use cluster_tests::{OperatorProcess, TestNamespace, eventually, free_port};
use kube::api::Api;
use mining_api::ToolRun;
use serde_json::{Value, json};
use sha2::Digest as _;

/// Rows of the example's CSV that make just over 16 MiB.
const ROWS: u64 = 1_300_000;
/// How long a finished run is kept: long enough to read its files twice.
const TTL_SECONDS: &str = "60";

/// The CSV the example writes, made here independently.
fn expected_csv(rows: u64) -> Vec<u8> {
    let mut text = String::from("n,value\n");
    for n in 1..=rows {
        text.push_str(&format!("{n},{}\n", n * n % 1_000_003));
    }
    text.into_bytes()
}

fn hex_sha256(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Runs the report tool as alice through `frontend` and checks every
/// promise of the issue; `stored_under` is where the store keeps files
/// on disk (the embedded directory, or s3s-fs's bucket directory).
async fn hands_over_files(ns: &TestNamespace, frontend: &FrontendProcess, stored_under: &Path) {
    let url = frontend.url();
    define(ns, &url, report_tool()).await;
    let started = call(Sdk::TypeScript, &url, ALICE, "report", json!({"rows": ROWS})).await;
    let id = started["workflow_id"].as_str().expect("a run id").to_string();
    let done = settle(Sdk::TypeScript, &url, ALICE, &id).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    let files = done["files"].as_array().cloned().unwrap_or_default();
    assert_eq!(files.len(), 2, "two files linked: {done:#}");
    let csv = expected_csv(ROWS);
    assert!(csv.len() > 16 << 20, "the CSV is over 16 MiB ({} bytes)", csv.len());
    let by_name = |name: &str| files.iter().find(|f| f["name"] == name).cloned().unwrap();
    let (csv_link, svg_link) = (by_name("data.csv"), by_name("chart.svg"));
    assert_eq!(csv_link["mimeType"], "text/csv");
    assert_eq!(csv_link["size"], csv.len() as u64);
    assert_eq!(svg_link["mimeType"], "image/svg+xml");

    // The tool result itself carries the links (content of type resource_link).
    let answered = Sdk::TypeScript.call(&url, ALICE, "get_tool_result", json!({"workflow_id": id})).await;
    let links: Vec<&Value> = answered["result"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == "resource_link")
        .collect();
    assert_eq!(links.len(), 2, "{answered:#}");
    assert!(links.iter().any(|l| l["uri"] == csv_link["uri"] && l["size"] == csv.len() as u64), "{links:#?}");

    // Both SDKs read both files, byte-identical.
    let csv_uri = csv_link["uri"].as_str().unwrap();
    let svg_uri = svg_link["uri"].as_str().unwrap();
    for sdk in [Sdk::TypeScript, Sdk::Python] {
        let read = sdk.run(&url, ALICE, false, &["read", csv_uri]).await;
        let content = &read["contents"][0];
        assert_eq!(content["sha256"], hex_sha256(&csv), "{sdk:?}: {read:#}");
        assert_eq!(content["bytes"], csv.len() as u64, "{sdk:?}");
        assert_eq!(content["mimeType"], "text/csv", "{sdk:?}");
        let read = sdk.run(&url, ALICE, false, &["read", svg_uri]).await;
        assert_eq!(read["contents"][0]["bytes"], svg_link["size"], "{sdk:?}: {read:#}");
        assert!(read["contents"][0]["sha256"].as_str().is_some_and(|s| s.len() == 64), "{read:#}");
    }

    // Another caller reads nothing, and learns nothing: the same answer as
    // for a URI nobody was given.
    let stolen = Sdk::TypeScript.run(&url, BOB, false, &["read", csv_uri]).await;
    let guessed =
        Sdk::TypeScript.run(&url, ALICE, false, &["read", &csv_uri.replace("data.csv", "secret.csv")]).await;
    let escaping =
        Sdk::TypeScript.run(&url, ALICE, false, &["read", &csv_uri.replace("data.csv", "..%2F..")]).await;
    for refused in [&stolen, &guessed, &escaping] {
        assert_eq!(refused["error"]["code"], -32002, "resource not found: {refused:#}");
    }
    assert_eq!(stolen["error"]["message"].as_str().map(|m| m.contains("not found")), Some(true));

    // The template is listed; no caller's files are.
    let listed = Sdk::TypeScript.run(&url, BOB, false, &["resources"]).await;
    assert_eq!(listed["resources"], json!([]), "{listed:#}");
    assert_eq!(listed["resourceTemplates"][0]["uriTemplate"], mining_api::tool_outputs::URI_TEMPLATE);

    // The files go with the run: once it expires, nothing of it is stored.
    let runs: Api<ToolRun> = ns.api();
    let uid = runs.get(&id).await.unwrap().metadata.uid.unwrap();
    let of_run = |path: &PathBuf| path.to_string_lossy().contains(&uid);
    assert_eq!(
        files_under(stored_under).iter().filter(|p| of_run(p)).count(),
        4,
        "two files and two records"
    );
    eventually("the expired run's files to be deleted", Duration::from_secs(150), || async {
        let gone = runs.get_opt(&id).await.ok()?.is_none();
        (gone && !files_under(stored_under).iter().any(of_run)).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster (tests/run.sh)"]
async fn a_tools_files_reach_its_caller_alone_from_the_embedded_store_and_go_with_the_run() {
    let (ns, _operator, frontend, dir) =
        setup_with_embedded_store("outputs", &["--default-ttl-seconds", TTL_SECONDS]).await;
    hands_over_files(&ns, &frontend, &dir).await;
}

#[tokio::test]
#[ignore = "needs a cluster (tests/run.sh) and s3s-fs (S3S_FS)"]
async fn a_tools_files_reach_its_caller_alone_from_an_s3_store_and_go_with_the_run() {
    let root = tempdir("s3");
    std::fs::create_dir_all(root.join("outputs")).unwrap();
    let server = S3Server::start(&root, "test-access", "test-secret-key").await;
    let s3 = server.addr;
    let addr = free_port().to_string();
    let base = format!("http://{addr}");
    let endpoint = format!("http://{s3}");
    let env = [
        ("AWS_ACCESS_KEY_ID", "test-access"),
        ("AWS_SECRET_ACCESS_KEY", "test-secret-key"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
    ];
    let ns = TestNamespace::new("outputs-s3").await;
    cluster_tests::install_crd(&ns.client).await;
    let key = cluster_tests::mcp::ownership_key_file(&ns.name);
    let mut args = vec!["--ownership-key-file", key.to_str().unwrap()];
    args.extend([
        "--outputs-store",
        "s3://outputs/tool-files",
        "--outputs-url",
        &base,
        "--outputs-addr",
        &addr,
        "--default-ttl-seconds",
        TTL_SECONDS,
    ]);
    let _operator = OperatorProcess::start_with_env(&cluster_tests::operator_binary(), &ns.name, &args, &env);
    let frontend = FrontendProcess::start_with_tokens(
        &ns.name,
        "alice-secret alice\nbob-secret bob\n",
        &["--outputs-url", &base],
    )
    .await;
    hands_over_files(&ns, &frontend, &root.join("outputs")).await;
}

/// docs/TOOLS.md's upload line, run as printed with a running run's two
/// variables (read from its Job and Secret, as its container gets them):
/// the file becomes the run's, recorded with its size and SHA-256.
#[tokio::test]
#[ignore = "needs a cluster (tests/run.sh)"]
async fn the_documented_upload_line_hands_over_a_file() {
    let (ns, _operator, frontend, _dir) = setup_with_embedded_store("outputs-doc", &[]).await;
    let url = frontend.url();
    define(&ns, &url, cluster_tests::tools::tool("sum-numbers", 1, json!({}))).await;
    let started =
        call(Sdk::TypeScript, &url, ALICE, "sum-numbers", json!({"numbers": [1], "delay_seconds": 20})).await;
    let id = started["workflow_id"].as_str().expect("a running run").to_string();
    let run = ns.api::<ToolRun>().get(&id).await.unwrap();
    let jobs = ns.api::<k8s_openapi::api::batch::v1::Job>();
    let job = eventually("the run's Job", Duration::from_secs(30), || async {
        jobs.get_opt(&run.job_name()).await.ok().flatten()
    })
    .await;
    let env = job.spec.unwrap().template.spec.unwrap().containers[0].env.clone().unwrap_or_default();
    let upload_url = env
        .iter()
        .find(|var| var.name == mining_api::tool_outputs::ENV_OUTPUTS_URL)
        .and_then(|var| var.value.clone())
        .expect("the run's upload URL");
    let secret = ns
        .api::<k8s_openapi::api::core::v1::Secret>()
        .get(&mining_api::tool::arguments_secret_name(&id))
        .await
        .unwrap();
    let token = secret.data.unwrap()[mining_api::tool_outputs::SECRET_KEY_OUTPUTS_TOKEN].0.clone();

    let line = &cluster_tests::docs::blocks("docs/TOOLS.md", "## Files: results beyond 4 KiB", "sh")[0];
    let work = tempdir("documented-work");
    let csv = b"n,value\n1,1\n2,4\n";
    std::fs::write(work.join("report.csv"), csv).unwrap();
    let uploaded = std::process::Command::new("sh")
        .args(["-ec", line])
        .current_dir(&work)
        .env("MCP_OUTPUTS_URL", &upload_url)
        .env("MCP_OUTPUTS_TOKEN", String::from_utf8(token).unwrap())
        .output()
        .unwrap();
    assert!(uploaded.status.success(), "{line}: {}", String::from_utf8_lossy(&uploaded.stderr));
    let record: Value = serde_json::from_slice(&uploaded.stdout).expect("the stored file's record");
    assert_eq!(record["sha256"], hex_sha256(csv), "{record:#}");

    let done = settle(Sdk::TypeScript, &url, ALICE, &id).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    let outputs = ns.api::<ToolRun>().get(&id).await.unwrap().status.unwrap().outputs;
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert_eq!(
        (outputs[0].name.as_str(), outputs[0].media_type.as_str(), outputs[0].size),
        ("report.csv", "text/csv", csv.len() as u64)
    );
    assert_eq!(outputs[0].sha256, hex_sha256(csv));
    let _ = std::fs::remove_dir_all(&work);
}

fn tempdir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mining-outputs-{what}-{}-{}",
        std::process::id(),
        free_port().port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
