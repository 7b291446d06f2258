//! Restricted tools and the caller's identity, on the real control plane
//! with Kubernetes tokens: RBAC (verb `call` on `mcptools/NAME`) decides who
//! sees, calls and follows a restricted tool — through the official SDKs'
//! tool calls, both task generations and the companion tools — and a tool
//! that asked learns who called (from a TokenReview, not from anything a
//! caller or the namespace could write), while one that did not learns
//! nothing.

use std::time::Duration;

use cluster_tests::mcp::{Sdk, structured, tool_error_text};
use cluster_tests::tasks::TaskClient;
use cluster_tests::tools::mcp_caller_rule;
use cluster_tests::tools::{ALICE, BOB, call, listed_names_for, setup_with_frontend_args};
use cluster_tests::{TestNamespace, eventually, service_account_token, sse};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, PostParams};
use mining_api::tool_caller::{CALL_VERB, TOOLS_RESOURCE};
use mining_api::{McpTool, ToolRun, Work as _};
use serde_json::{Value, json};

/// A tool whose result is who called it, as its environment says.
fn whoami(name: &str, spec: Value) -> McpTool {
    shell_tool(name, WHOAMI, spec)
}

const WHOAMI: &str = r#"printf '{"caller":"%s","claims":%s}' "${MCP_CALLER:-none}" "${MCP_CALLER_CLAIMS:-null}" > /dev/termination-log"#;

/// A tool that runs `script` in `sh`, with `spec`'s fields added.
fn shell_tool(name: &str, script: &str, spec: Value) -> McpTool {
    let mut value = json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "McpTool",
        "metadata": {"name": name},
        "spec": {
            "description": "Says who called it.",
            "inputSchema": {"type": "object", "properties": {}},
            "outputSchema": {"type": "object", "properties": {"caller": {"type": "string"}}, "required": ["caller"]},
            "waitBudgetSeconds": 60,
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "tool", "image": "local/shell", "command": ["sh", "-c", script]}]}}}},
        },
    });
    value["spec"].as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    serde_json::from_value(value).unwrap()
}

fn subject(name: &str, namespace: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
        ..Default::default()
    }
}

async fn role(ns: &TestNamespace, name: &str, rule: PolicyRule, subjects: Vec<Subject>) {
    let roles: Api<Role> = ns.api();
    let mut role = Role::default();
    role.metadata.name = Some(name.into());
    role.rules = Some(vec![rule]);
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<RoleBinding> = ns.api();
    let mut binding = RoleBinding::default();
    binding.metadata.name = Some(name.into());
    binding.role_ref =
        RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name: name.into() };
    binding.subjects = Some(subjects);
    bindings.create(&PostParams::default(), &binding).await.unwrap();
}

/// Runs docs/TOOLS.md's commands that grant the restricted tool `deploy` to
/// the ServiceAccount `mining-callers:agent`, with this test's names.
fn grant_as_documented(workflows: &str, callers: &str, account: &str, tool: &str) {
    let docs = std::fs::read_to_string(cluster_tests::repo_root().join("docs/TOOLS.md")).unwrap();
    let start = docs
        .find("  ```console\n  kubectl -n mining-workflows create role call-deploy")
        .expect("the grant in TOOLS.md");
    let block = &docs[start + "  ```console\n".len()..];
    let block = &block[..block.find("  ```").unwrap()];
    let script = block
        .replace("mining-workflows", workflows)
        .replace("mining-callers:agent", &format!("{callers}:{account}"))
        .replace("--resource-name=deploy", &format!("--resource-name={tool}"));
    let status = std::process::Command::new("sh").arg("-ec").arg(&script).status().unwrap();
    assert!(status.success(), "TOOLS.md's grant failed:\n{script}");
}

#[tokio::test]
async fn rbac_decides_who_sees_calls_and_follows_a_restricted_tool_and_only_a_tool_that_asked_learns_who_called()
 {
    // --auth-cache-seconds 1: a revoked grant shows within seconds.
    let (ns, _operator, frontend) =
        setup_with_frontend_args("tool-access", &["--auth", "kubernetes", "--auth-cache-seconds", "1"]).await;
    let url = frontend.url();
    let callers = TestNamespace::new("tool-access-callers").await;
    let granted = service_account_token(&callers, "granted").await;
    let plain = service_account_token(&callers, "plain").await;
    // Both may use the MCP tools (the chart's -mcp-caller rule) ...
    let mcp = mcp_caller_rule();
    role(&ns, "callers", mcp, vec![subject("granted", &callers.name), subject("plain", &callers.name)]).await;
    // ... and only `granted` may call the restricted tool, by name: the
    // commands of docs/TOOLS.md, as printed (its names put in).
    grant_as_documented(&ns.name, &callers.name, "granted", "whoami");

    let tools: Api<McpTool> = ns.api();
    let restricted =
        whoami("whoami", json!({"restricted": true, "callerIdentity": {"claims": ["groups", "uid"]}}));
    tools.create(&PostParams::default(), &restricted).await.unwrap();
    tools.create(&PostParams::default(), &whoami("open-whoami", json!({}))).await.unwrap();
    eventually("both tools listed to the granted caller", Duration::from_secs(30), || async {
        let names = listed_names_for(&url, Some(&granted)).await;
        (names.contains(&"whoami".to_string()) && names.contains(&"open-whoami".to_string())).then_some(())
    })
    .await;
    let plains = listed_names_for(&url, Some(&plain)).await;
    assert!(plains.contains(&"open-whoami".to_string()), "{plains:?}");
    assert!(
        !plains.contains(&"whoami".to_string()),
        "a restricted tool is not listed to the ungranted: {plains:?}"
    );

    // The ungranted caller's call is refused, naming the permission and nobody.
    let refused = Sdk::Python.call(&url, Some(&plain), "whoami", json!({})).await;
    let text = tool_error_text(&refused);
    assert!(text.contains(&format!("{CALL_VERB:?} on {TOOLS_RESOURCE}/whoami")), "{refused:#}");
    assert!(!text.contains("plain") && !text.contains("granted"), "names nobody: {text}");
    // The same as a task, in both generations: no task, no run.
    // (ext-tasks' `run` prefers a task and takes the immediate refusal; its
    // `start` requires one and reports only that none came.)
    for (client, command) in [(TaskClient::TypeScript2025, "start"), (TaskClient::Extension2026, "run")] {
        let document = client.run_tool("whoami", &url, Some(&plain), &[command, "{}"]).await;
        assert!(document.to_string().contains("mcptools/whoami"), "{client:?}: {document:#}");
    }
    // For the ungranted the tool is not there: the 2025 task call's error is
    // the spec's invalid-params, not an internal error (red team round 5).
    let document = TaskClient::TypeScript2025.run_tool("whoami", &url, Some(&plain), &["start", "{}"]).await;
    assert_eq!(document["error"]["code"].as_i64(), Some(-32602), "{document:#}");
    let runs: Api<ToolRun> = ns.api();
    assert!(runs.list(&Default::default()).await.unwrap().items.is_empty(), "a refused call made no run");

    // The granted caller's call runs, and the tool learns who called (the
    // TokenReview's username and groups) from the run's Secret.
    let done = call(Sdk::TypeScript, &url, Some(&granted), "whoami", json!({})).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    let result = &done["result"];
    assert_eq!(result["caller"], format!("system:serviceaccount:{}:granted", callers.name), "{done:#}");
    let groups = result["claims"]["groups"].as_array().unwrap_or_else(|| panic!("{done:#}"));
    assert!(groups.iter().any(|g| g == "system:serviceaccounts"), "{done:#}");
    assert!(result["claims"]["uid"].is_string(), "{done:#}");
    // A tool that did not ask learns nothing, whoever calls it.
    let open = call(Sdk::Python, &url, Some(&granted), "open-whoami", json!({})).await;
    assert_eq!(open["status"], "completed", "{open:#}");
    assert_eq!(open["result"], json!({"caller": "none", "claims": null}), "{open:#}");
    // Nobody who may write runs changes who called: the record is bound by
    // the run's proof (a run whose caller was edited is no longer the caller's).
    let id = done["workflow_id"].as_str().unwrap().to_string();
    let stored = runs.get(&id).await.unwrap();
    assert_eq!(
        stored.spec.caller.as_ref().map(|c| c.subject.clone()),
        Some(format!("system:serviceaccount:{}:granted", callers.name))
    );

    // The grant revoked: the run is no longer followed by its own caller,
    // through the companion tool or a task, and the tool is no longer listed.
    let bindings: Api<RoleBinding> = ns.api();
    bindings.delete("agent-calls-deploy", &DeleteParams::default()).await.unwrap();
    eventually("the revoked grant to refuse get_tool_result", Duration::from_secs(30), || async {
        let seen =
            Sdk::Python.call(&url, Some(&granted), "get_tool_result", json!({"workflow_id": id})).await;
        let refused = seen["result"]["isError"] == true;
        (refused && seen["result"]["content"][0]["text"].as_str()?.contains("mcptools/whoami")).then_some(())
    })
    .await;
    let got = TaskClient::TypeScript2025.run_tool("whoami", &url, Some(&granted), &["get", &id]).await;
    assert!(got["error"].is_object(), "{got:#}");
    assert!(!listed_names_for(&url, Some(&granted)).await.contains(&"whoami".to_string()));
    let listed_open = structured(
        &Sdk::Python
            .call(&url, Some(&plain), "get_tool_result", json!({"workflow_id": open["workflow_id"]}))
            .await,
    )
    .clone();
    assert_eq!(listed_open["status"], "not_found", "another caller's run stays unseen: {listed_open:#}");
}

#[tokio::test]
async fn without_rbac_the_grants_file_decides_and_a_grant_of_one_tool_is_no_grant_of_another() {
    let grants = cluster_tests::mcp::tokens_file(r#"{"whoami": {"subjects": ["alice"]}}"#);
    let grants = grants.to_str().unwrap();
    let tokens = cluster_tests::mcp::tokens_file("alice-secret alice\nbob-secret bob\n");
    let (ns, _operator, frontend) = setup_with_frontend_args(
        "tool-grants",
        &["--auth", "tokens", "--tokens-file", tokens.to_str().unwrap(), "--tool-grants", grants],
    )
    .await;
    let url = frontend.url();
    let tools: Api<McpTool> = ns.api();
    let restricted = json!({"restricted": true, "callerIdentity": {}});
    for (name, spec) in [("whoami", restricted.clone()), ("other", restricted)] {
        tools.create(&PostParams::default(), &whoami(name, spec)).await.unwrap();
    }
    eventually("the granted tool listed to alice", Duration::from_secs(30), || async {
        listed_names_for(&url, ALICE).await.contains(&"whoami".to_string()).then_some(())
    })
    .await;
    let alices = listed_names_for(&url, ALICE).await;
    assert!(!alices.contains(&"other".to_string()), "granted whoami only: {alices:?}");
    let bobs = listed_names_for(&url, BOB).await;
    assert!(!bobs.iter().any(|t| t == "whoami" || t == "other"), "{bobs:?}");
    let refused = Sdk::TypeScript.call(&url, BOB, "whoami", json!({})).await;
    assert!(tool_error_text(&refused).contains("--tool-grants"), "{refused:#}");
    let done = call(Sdk::Python, &url, ALICE, "whoami", json!({})).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(
        done["result"],
        json!({"caller": "alice", "claims": null}),
        "tokens mode names only the subject"
    );
}

/// Red team, round 5: a listen opened while the caller held the grant went
/// on after it was revoked and delivered the run's completion with its
/// result, while `tasks/get` was refused. Each notification now needs the
/// grant, as every request does.
#[tokio::test]
async fn a_grant_revoked_while_a_listen_is_open_ends_what_the_listen_tells() {
    let (ns, _operator, frontend) =
        setup_with_frontend_args("listen-revoked", &["--auth", "kubernetes", "--auth-cache-seconds", "1"])
            .await;
    let callers = TestNamespace::new("listen-revoked-callers").await;
    let granted = service_account_token(&callers, "granted").await;
    let mcp = mcp_caller_rule();
    role(&ns, "callers", mcp, vec![subject("granted", &callers.name)]).await;
    grant_as_documented(&ns.name, &callers.name, "granted", "slow");
    // Long enough to revoke the grant (and see it revoked) while it runs.
    let script = format!("sleep 30; {WHOAMI}");
    let tools: Api<McpTool> = ns.api();
    tools
        .create(&PostParams::default(), &shell_tool("slow", &script, json!({"restricted": true})))
        .await
        .unwrap();
    let url = frontend.url();
    eventually("the restricted tool listed to the granted caller", Duration::from_secs(30), || async {
        listed_names_for(&url, Some(&granted)).await.contains(&"slow".to_string()).then_some(())
    })
    .await;

    let task = frontend.start_2025_task_of(&granted, "slow", &json!({})).await;
    let mut stream = sse::listen(frontend.addr, &granted, "l1", json!({"taskIds": [task]}), true).await;
    let ack = stream.next(Duration::from_secs(10)).await.expect("an acknowledgement");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([task]), "{ack}");
    let first = stream.next(Duration::from_secs(10)).await.expect("the task as it is");
    assert_eq!(first["params"]["status"], "working", "{first}");

    let bindings: Api<RoleBinding> = ns.api();
    bindings.delete("agent-calls-deploy", &DeleteParams::default()).await.unwrap();
    eventually("the revoked grant to refuse get_tool_result", Duration::from_secs(20), || async {
        let seen =
            Sdk::Python.call(&url, Some(&granted), "get_tool_result", json!({"workflow_id": task})).await;
        (seen["result"]["isError"] == true).then_some(())
    })
    .await;
    let runs: Api<ToolRun> = ns.api();
    eventually("the run to finish", Duration::from_secs(120), || async {
        runs.get(&task).await.ok().filter(|run| run.lifecycle().is_finished()).map(|_| ())
    })
    .await;
    // The run finished: the listen says no more of it and ends.
    let mut told = Vec::new();
    let closing = loop {
        let message =
            stream.next(Duration::from_secs(30)).await.expect("the listen to end once it may not tell");
        if message.get("id").is_some() {
            break message;
        }
        told.push(message);
    };
    assert_eq!(closing["id"], "l1", "{closing}");
    for message in &told {
        assert_ne!(message["params"]["status"], "completed", "told after the revocation: {message}");
        assert!(!message.to_string().contains("caller"), "the result after the revocation: {message}");
    }
}
