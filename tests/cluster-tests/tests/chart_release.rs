//! The chart installed for real into the local test cluster. The operator and
//! the frontend run as Pods under their own ServiceAccounts (the node agent
//! gives them in-cluster credentials, Pod IPs, probes, and plays kube-proxy
//! and cluster DNS for Services). The official Python SDK client mines
//! through the frontend's Service, `helm test` passes, an upgrade takes a
//! changed value, and uninstalling leaves nothing of the release behind.

use std::time::Duration;

use cluster_tests::helm::{chart_queries, metric_families};
use cluster_tests::mcp::{http_request, structured, tool_error_text};
use cluster_tests::release::{Release, ready_addresses};
use cluster_tests::{TOKEN_AUDIENCE, account_token, assert_reference_chain, eventually};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use mining_api::MiningWorkflow;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(180);

#[ignore = "needs the local cluster, whose node agent maps the chart's images; tests/run.sh runs it there"]
#[tokio::test]
async fn the_chart_installs_mines_through_its_service_passes_helm_test_upgrades_and_uninstalls_cleanly() {
    let release = Release::install("helm", &[]).await;
    let ns = &release.ns;

    // Both frontend replicas stand behind the Service, each at its own address.
    let endpoints: Api<Endpoints> = ns.api();
    let addresses = eventually("two ready frontend endpoints", TIMEOUT, || async {
        let found = endpoints.get(&release.frontend()).await.ok()?;
        Some(ready_addresses(&found)).filter(|a| a.len() == 2)
    })
    .await;
    assert_ne!(addresses[0], addresses[1]);

    // Two operator replicas, one leader: the chart's Lease names one of its Pods.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
    let lease = format!("{}-operator", release.fullname());
    let holder = eventually("the operator Lease to have a holder", TIMEOUT, || async {
        leases.get_opt(&lease).await.ok().flatten()?.spec?.holder_identity
    })
    .await;
    let operator_pods: Api<Pod> = ns.api();
    let holder_pod = operator_pods.get(&holder).await.expect("the holder is a Pod of the release");
    // Scheduled before the miners: the chart's PriorityClass, resolved by the API server.
    assert_eq!(holder_pod.spec.as_ref().and_then(|s| s.priority), Some(100000));

    // Each frontend reads that Lease under its own account: it knows an operator leads.
    for address in &addresses {
        let metrics: std::net::SocketAddr = format!("{address}:9090").parse().unwrap();
        eventually("the frontend to see the operator lead", TIMEOUT, || async {
            let (_, _, body) =
                http_request(metrics, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n", "").await;
            body.lines().any(|l| l == "mcp_frontend_operator_leading 1").then_some(())
        })
        .await;
    }
    assert_eq!(holder_pod.metadata.labels.unwrap()["app.kubernetes.io/component"], "operator");

    // A client mines a chain through the Service; the chain is the reference's.
    let token = release.user_token("agent").await;
    let outcome = release.mine(&token, json!({"difficulty": 8, "blocks": 3, "wait_seconds": 20})).await;
    assert_reference_chain(&outcome, 3, 8);
    let workflows: Api<MiningWorkflow> = release.work.api();
    let id = outcome["workflow_id"].as_str().unwrap();
    let stored = workflows.get(id).await.expect("the workflow is a MiningWorkflow in the workflow namespace");
    assert_eq!(stored.status.and_then(|s| s.phase).map(|p| p.to_string()).as_deref(), Some("Succeeded"));

    // The series the chart's alerts and dashboard read are exported under
    // those names (a family shows once it has a sample; these have by now).
    let queries = chart_queries(&release.helm, &release.name, &ns.name);
    let operator_metrics: std::net::SocketAddr =
        format!("{}:8081", holder_pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap())
            .parse()
            .unwrap();
    // Both frontend replicas: the Service sent the calls to either.
    let mut scraped = vec![operator_metrics];
    scraped.extend(addresses.iter().map(|a| format!("{a}:9090").parse::<std::net::SocketAddr>().unwrap()));
    let mut exported = String::new();
    for addr in scraped {
        exported += &http_request(addr, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n", "").await.2;
    }
    let families = metric_families(&queries);
    for family in [
        "mining_operator_leader",
        "mining_operator_workflows",
        "mining_operator_block_duration_seconds",
        "mining_operator_api_calls",
        "mcp_frontend_operator_leading",
        "mcp_frontend_tool_calls",
        "mcp_frontend_tool_duration_seconds",
    ] {
        assert!(families.contains(family), "the chart does not read {family}");
        assert!(exported.contains(&format!("# TYPE {family} ")), "{family} is not exported:\n{exported}");
    }

    // `helm test`: a Pod that resolves the Service by name and calls /mcp.
    let tested = release.helm_in_namespace(&["test", &release.name, "--timeout", "120s"]);
    assert!(tested.contains("Phase:") && tested.contains("Succeeded"), "{tested}");

    // An upgrade with a changed value: the new default block count.
    release.helm_in_namespace(&[
        "upgrade",
        &release.name,
        "--reuse-values",
        "--set",
        "frontend.defaultBlocks=2",
        "--take-ownership",
    ]);
    release.rolled_out().await;
    let outcome = release.mine(&token, json!({"difficulty": 8, "wait_seconds": 20})).await;
    assert_reference_chain(&outcome, 2, 8);

    // Workflows are the users' data: deleting them takes their Jobs and Pods.
    workflows.delete_collection(&DeleteParams::background(), &ListParams::default()).await.unwrap();
    let jobs: Api<Job> = release.work.api();
    eventually("the workflows' Jobs to go", TIMEOUT, || async {
        jobs.list(&ListParams::default()).await.ok()?.items.is_empty().then_some(())
    })
    .await;

    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
    let pods: Api<Pod> = ns.api();
    eventually("no Pods left", TIMEOUT, || async {
        pods.list(&ListParams::default()).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    let of_release = ListParams::default().labels(&format!("app.kubernetes.io/instance={}", release.name));
    assert!(jobs.list(&ListParams::default()).await.unwrap().items.is_empty());
    assert!(ns.api::<Role>().list(&of_release).await.unwrap().items.is_empty());
    assert!(ns.api::<RoleBinding>().list(&of_release).await.unwrap().items.is_empty());
    assert!(ns.api::<ServiceAccount>().list(&of_release).await.unwrap().items.is_empty());
    assert!(ns.api::<Service>().list(&of_release).await.unwrap().items.is_empty());
    let cluster_roles: Api<ClusterRole> = Api::all(ns.client.clone());
    assert!(cluster_roles.list(&of_release).await.unwrap().items.is_empty(), "aggregated ClusterRoles stay");
    let classes: Api<PriorityClass> = Api::all(ns.client.clone());
    assert!(classes.list(&of_release).await.unwrap().items.is_empty(), "the PriorityClass stays");
    // The CRD stays, by design: removing it would delete every user's workflows.
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());
    assert!(crds.get_opt("miningworkflows.mining-operator.dev").await.unwrap().is_some());
}

#[ignore = "needs the local cluster, whose node agent maps the chart's images; tests/run.sh runs it there"]
#[tokio::test]
async fn a_component_whose_service_account_lacks_a_rule_fails_visibly() {
    let release =
        Release::install("helm-rbac", &["--set", "frontend.replicas=1", "--set", "operator.replicas=1"])
            .await;
    let ns = &release.ns;
    let token = release.user_token("agent").await;
    // Both components' Roles for workflows and Jobs are in the workflow namespace.
    let roles: Api<Role> = release.work.api();
    let without = |role: &Role, resource: &str| -> Value {
        let rules: Vec<Value> = (role.rules.iter().flatten())
            .filter(|r| !r.resources.iter().flatten().any(|x| x == resource))
            .map(|r| serde_json::to_value(r).unwrap())
            .collect();
        json!({"rules": rules})
    };

    // The operator may no longer create Jobs: the workflow says why it stands still.
    let operator_role = roles.get(&format!("{}-operator", release.fullname())).await.unwrap();
    let patch = Patch::Merge(without(&operator_role, "jobs"));
    roles.patch(&format!("{}-operator", release.fullname()), &PatchParams::default(), &patch).await.unwrap();
    let started =
        release.call(&token, "start_mining", json!({"difficulty": 8, "blocks": 1, "wait_seconds": 0})).await;
    let id = structured(&started)["workflow_id"].as_str().unwrap().to_string();
    let events: Api<Event> = release.work.api();
    let note = eventually("a Forbidden Event on the workflow", TIMEOUT, || async {
        let listed = events.list(&ListParams::default()).await.ok()?;
        listed.items.into_iter().find_map(|e| {
            let about = e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(id.as_str());
            (about && e.reason.as_deref() == Some("Forbidden")).then(|| e.note.unwrap_or_default())
        })
    })
    .await;
    let operator_account = format!("system:serviceaccount:{}:{}-operator", ns.name, release.fullname());
    assert!(note.contains(&operator_account) && note.contains("jobs"), "{note}");
    let stuck = release.call(&token, "get_mining_result", json!({"workflow_id": id})).await;
    assert_eq!(structured(&stuck)["status"], "running", "no Job, no progress");

    // The frontend may no longer create MiningWorkflows: the tool says so.
    let frontend_role = roles.get(&release.frontend()).await.unwrap();
    let mut rules = without(&frontend_role, "miningworkflows");
    let read_only = json!({"apiGroups": ["mining-operator.dev"], "resources": ["miningworkflows"],
                           "verbs": ["get", "list", "watch", "patch"]});
    rules["rules"].as_array_mut().unwrap().push(read_only);
    roles.patch(&release.frontend(), &PatchParams::default(), &Patch::Merge(rules)).await.unwrap();
    let refused = eventually("start_mining to be refused", TIMEOUT, || async {
        let document = release.call(&token, "start_mining", json!({"difficulty": 8, "blocks": 1})).await;
        (document["result"]["isError"] == true).then_some(document)
    })
    .await;
    let text = tool_error_text(&refused);
    let frontend_account = format!("system:serviceaccount:{}:{}", ns.name, release.frontend());
    assert!(text.contains("forbidden") && text.contains(&frontend_account), "{text}");
    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
}

#[ignore = "needs the local cluster, whose node agent maps the chart's images; tests/run.sh runs it there"]
#[tokio::test]
async fn tokens_mode_reads_its_secret_and_refuses_other_tokens() {
    let tokens = ["--set", "frontend.auth.mode=tokens", "--set", "frontend.auth.tokens=alice-secret alice"];
    let release = Release::install(
        "helm-tokens",
        &[&tokens[..], &["--set", "frontend.replicas=1", "--set", "operator.replicas=1"]].concat(),
    )
    .await;
    // The frontend reads the chart's Secret, mounted as a file.
    let outcome =
        release.mine("alice-secret", json!({"difficulty": 8, "blocks": 1, "wait_seconds": 20})).await;
    assert_reference_chain(&outcome, 1, 8);
    let refused = release.call("mallory-guess", "list_mining_workflows", json!({})).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("401"), "another token must be refused: {refused:#}");
    // The helm-test Pod takes its token from the same Secret.
    let tested = release.helm_in_namespace(&["test", &release.name, "--timeout", "120s"]);
    assert!(tested.contains("Succeeded"), "{tested}");
    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
}

#[ignore = "needs the local cluster, whose node agent maps the chart's images; tests/run.sh runs it there"]
#[tokio::test]
async fn oidc_mode_with_the_api_server_as_issuer_reads_its_keys_under_the_charts_own_account() {
    const AUDIENCE: &str = "helm-oidc-audience";
    let oidc = [
        "--set",
        "frontend.auth.mode=oidc",
        "--set",
        "frontend.auth.oidc.issuer=https://kubernetes.default.svc",
        "--set",
        "frontend.auth.oidc.kubernetesKeys=true",
        "--set",
        "frontend.auth.oidc.audience=helm-oidc-audience",
    ];
    let release = Release::install(
        "helm-oidc",
        &[&oidc[..], &["--set", "frontend.replicas=1", "--set", "operator.replicas=1"]].concat(),
    )
    .await;
    // Any ServiceAccount's token minted for the audience is a caller: the
    // frontend Pod verified it with keys it read under its own account.
    let accounts: Api<ServiceAccount> = release.ns.api();
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "agent"}})).unwrap();
    accounts.create(&PostParams::default(), &sa).await.unwrap();
    let token = account_token(&release.ns.client, &release.ns.name, "agent", Some(AUDIENCE)).await;
    let outcome = release.mine(&token, json!({"difficulty": 8, "blocks": 1, "wait_seconds": 20})).await;
    assert_reference_chain(&outcome, 1, 8);
    // The same account's token for the chart's kubernetes-mode audience is not for this server.
    let other = account_token(&release.ns.client, &release.ns.name, "agent", Some(TOKEN_AUDIENCE)).await;
    let refused = release.call(&other, "list_mining_workflows", json!({})).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("401"), "a token for another audience must be refused: {refused:#}");
    // helm test: the challenge, the metadata, and a call with its projected token.
    let tested = release.helm_in_namespace(&["test", &release.name, "--timeout", "120s"]);
    assert!(tested.contains("Succeeded"), "{tested}");
    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
}

/// Installs a tokens-mode release with `values`, runs the example `report`
/// tool as alice through the frontend's Service, and reads its CSV with the
/// Python SDK through the same Service: the bytes must be the CSV the test
/// makes. Returns the release (to look at, then uninstall), the CSV's URI
/// and its SHA-256.
async fn report_read_through_the_service(
    prefix: &str,
    values: &[&str],
    secrets: &[(&str, &[(&str, &str)])],
) -> (Release, String, String) {
    use sha2::Digest as _;
    let tokens = ["--set", "frontend.auth.mode=tokens", "--set", "frontend.auth.tokens=alice-secret alice"];
    let values = [&tokens[..], &["--set", "frontend.replicas=1"], values].concat();
    let release = Release::install_with_secrets(prefix, &values, secrets).await;
    let report: mining_api::McpTool = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "McpTool", "metadata": {"name": "report"},
        "spec": {"description": "Writes a CSV and a chart.", "waitBudgetSeconds": 5,
            "inputSchema": {"type": "object", "properties": {"rows": {"type": "integer", "minimum": 1}}},
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "tool", "image": "localhost/mining-operator/report:dev"}]}}}}}
    }))
    .unwrap();
    release.work.api::<mining_api::McpTool>().create(&Default::default(), &report).await.unwrap();
    let started = eventually("the report tool to be offered", Duration::from_secs(60), || async {
        let called = release.call("alice-secret", "report", json!({"rows": 200_000})).await;
        called["result"]["structuredContent"]["workflow_id"].is_string().then_some(called)
    })
    .await;
    let id = structured(&started)["workflow_id"].as_str().unwrap().to_string();
    let done = release.settle_tool_run("alice-secret", &id).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    let csv = done["files"].as_array().into_iter().flatten().find(|f| f["name"] == "data.csv").cloned();
    let csv = csv.unwrap_or_else(|| panic!("data.csv linked: {done:#}"));
    let mut expected = String::from("n,value\n");
    for n in 1..=200_000u64 {
        expected.push_str(&format!("{n},{}\n", n * n % 1_000_003));
    }
    let digest: String =
        sha2::Sha256::digest(expected.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let uri = csv["uri"].as_str().unwrap().to_string();
    let read = release.read("alice-secret", &uri).await;
    assert_eq!(read["contents"][0]["sha256"], digest, "{read:#}");
    assert_eq!(read["contents"][0]["bytes"], expected.len() as u64);
    (release, uri, digest)
}

#[ignore = "needs the local cluster, whose node agent maps the chart's images; tests/run.sh runs it there"]
#[tokio::test]
async fn a_tools_files_reach_its_caller_through_the_charts_service_from_the_leaders_embedded_store() {
    // Two operator replicas (the default), each with a volume of its own:
    // the outputs Service reaches only the leader, and the other keeps a copy.
    let (release, uri, digest) = report_read_through_the_service("helm-files", &[], &[]).await;
    let outputs = format!("{}-operator-outputs", release.fullname());
    let endpoints = release.ns.api::<Endpoints>().get(&outputs).await.unwrap();
    assert_eq!(ready_addresses(&endpoints).len(), 1, "{endpoints:?}");
    // An upgrade that replaces both replicas, the leader too: the file is
    // still read, byte for byte, from the new leader (a standby's copy).
    let leader_before = leader_pod(&release).await;
    release.helm_in_namespace(&[
        "upgrade",
        &release.name,
        "--reuse-values",
        "--set",
        "operator.podAnnotations.rolled=again",
        "--take-ownership",
    ]);
    release.rolled_out().await;
    let leader_after = eventually("a new leader", TIMEOUT, || async {
        Some(leader_pod(&release).await).filter(|pod| *pod != leader_before)
    })
    .await;
    let pods = release.ns.api::<Pod>();
    assert!(
        pods.get_opt(&leader_before).await.unwrap().is_none(),
        "{leader_before} was replaced by {leader_after}"
    );
    let read = eventually("the file to be read through the new leader", TIMEOUT, || async {
        let read = release.read("alice-secret", &uri).await;
        (read["contents"][0]["sha256"] == digest).then_some(read)
    })
    .await;
    assert_eq!(read["contents"][0]["sha256"], digest, "{read:#}");
    // The default install binds nobody in its workflow namespace: the
    // audit of who holds the callers' runs lists nobody (exit status 0).
    let audited = std::process::Command::new(cluster_tests::mcp::release_binary("kubectl-mining"))
        .args(["audit", "-n", &release.work.name, "--product-namespace", &release.ns.name, "-o", "json"])
        .output()
        .expect("kubectl-mining runs");
    let report: Value = serde_json::from_slice(&audited.stdout).unwrap_or_default();
    assert_eq!(audited.status.code(), Some(0), "{report:#} {}", String::from_utf8_lossy(&audited.stderr));
    assert_eq!(report["findings"], json!([]), "{report:#}");
    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
}

#[ignore = "needs the local cluster and s3s-fs (S3S_FS); tests/run.sh runs it there"]
#[tokio::test]
async fn a_tools_files_reach_its_caller_through_the_charts_service_from_an_s3_store() {
    let root = std::env::temp_dir().join(format!("helm-s3-{}", std::process::id()));
    std::fs::create_dir_all(root.join("runs-bucket")).unwrap();
    let server = cluster_tests::s3::S3Server::start(&root, "chart-access", "chart-secret-key").await;
    let s3 = server.addr;
    // The operator's Pods share the host's network here, so they reach it.
    let endpoint = format!("outputs.s3.endpoint=http://{s3}");
    // The credentials as the chart documents them: a Secret the
    // administrator made, named by `outputs.s3.existingSecret` (envFrom).
    let values = [
        "--set",
        "outputs.store=s3",
        "--set",
        "outputs.s3.bucket=runs-bucket",
        "--set",
        &endpoint,
        "--set",
        "outputs.s3.allowHttp=true",
        "--set",
        "outputs.s3.existingSecret=s3-credentials",
    ];
    let credentials: &[(&str, &str)] =
        &[("AWS_ACCESS_KEY_ID", "chart-access"), ("AWS_SECRET_ACCESS_KEY", "chart-secret-key")];
    let (release, _, _) =
        report_read_through_the_service("helm-s3", &values, &[("s3-credentials", credentials)]).await;
    // The bytes are in the bucket, under the configured prefix.
    let stored =
        std::fs::read_dir(root.join("runs-bucket").join("tool-outputs")).map(|d| d.count()).unwrap_or(0);
    assert!(stored > 0, "the bucket holds the run's files under tool-outputs/");
    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
    drop(server);
    let _ = std::fs::remove_dir_all(&root);
}

#[ignore = "needs the local cluster, whose node agent maps the chart's images; tests/run.sh runs it there"]
#[tokio::test]
async fn the_override_variant_installs_and_mines_under_the_accounts_and_contexts_it_names() {
    let variant = format!("{}/ci/overrides-values.yaml", cluster_tests::helm::chart());
    let one = ["--set", "frontend.replicas=1", "--set", "operator.replicas=1"];
    let release = Release::install("helm-ovr", &[&["-f", variant.as_str()][..], &one[..]].concat()).await;
    let ns = &release.ns;
    // The operator runs as the account the values name, annotated for workload identity.
    let accounts: Api<ServiceAccount> = ns.api();
    let operator_account = accounts.get("mining-operator-sa").await.expect("the named account is made");
    let annotations = operator_account.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("eks.amazonaws.com/role-arn").map(String::as_str),
        Some("arn:aws:iam::111122223333:role/mining-outputs")
    );
    let pods: Api<Pod> = ns.api();
    let operator_pods =
        pods.list(&ListParams::default().labels("app.kubernetes.io/component=operator")).await.unwrap();
    let spec = operator_pods.items[0].spec.clone().unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("mining-operator-sa"));
    let pod_context = spec.security_context.unwrap_or_default();
    assert_eq!(
        (pod_context.run_as_user, pod_context.fs_group),
        (None, None),
        "no fixed UID for OpenShift's SCC"
    );
    assert_eq!(pod_context.run_as_non_root, Some(true), "still never root");
    let mounts = spec.containers[0].volume_mounts.clone().unwrap_or_default();
    assert!(mounts.iter().any(|m| m.mount_path == "/etc/ssl/corporate"), "{mounts:?}");
    // And it mines, through the frontend, under those accounts and its bindings to them.
    let token = release.user_token("agent").await;
    let started =
        release.call(&token, "start_mining", json!({"difficulty": 8, "blocks": 1, "wait_seconds": 0})).await;
    let outcome = structured(&started);
    let id = outcome["workflow_id"].as_str().unwrap().to_string();
    let workflows: Api<MiningWorkflow> = release.work.api();
    eventually("the workflow to succeed", TIMEOUT, || async {
        let workflow = workflows.get(&id).await.ok()?;
        (workflow.status?.phase? == mining_api::WorkflowPhase::Succeeded).then_some(())
    })
    .await;
}

/// The operator Pod the Lease names as leader.
async fn leader_pod(release: &Release) -> String {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = release.ns.api();
    let lease = format!("{}-operator", release.fullname());
    eventually("the operator Lease to have a holder", TIMEOUT, || async {
        leases.get_opt(&lease).await.ok().flatten()?.spec?.holder_identity
    })
    .await
}
