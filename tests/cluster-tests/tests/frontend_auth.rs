//! Who may call the MCP frontend, and what each caller may see: bearer tokens
//! from a file, and Kubernetes tokens checked by TokenReview and RBAC.

use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, Sdk, structured, tokens_file};
use cluster_tests::tools::mcp_caller_rule;
use cluster_tests::{
    OperatorProcess, TestNamespace, account_token, eventually, install_crd, service_account_token,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, PostParams};
use mining_api::MiningWorkflow;
use serde_json::json;

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

#[tokio::test]
async fn tokens_authenticate_callers_and_each_caller_sees_only_its_own_workflows() {
    let ns = TestNamespace::new("mcp-tokens").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let path = tokens_file("# test callers\nalice-secret alice\nbob-secret bob\n");
    let frontend =
        FrontendProcess::start(&ns.name, &["--auth", "tokens", "--tokens-file", path.to_str().unwrap()])
            .await;
    let url = frontend.url();

    // No token, a wrong token, another scheme: 401 with a Bearer challenge.
    for headers in [&[][..], &["Authorization: Bearer wrong"], &["Authorization: Basic YWxpY2U6eA=="]] {
        let (code, head, _) = frontend.post_mcp("localhost", headers, TOOLS_LIST).await;
        assert_eq!(code, 401, "{headers:?}");
        assert!(head.to_ascii_lowercase().contains("www-authenticate: bearer"), "{head}");
    }
    assert_eq!(
        frontend.post_mcp("localhost", &["Authorization: Bearer alice-secret"], TOOLS_LIST).await.0,
        200
    );
    // The SDK clients see the refusal as an error.
    for sdk in [Sdk::TypeScript, Sdk::Python] {
        let document = sdk.call(&url, Some("wrong"), "list_mining_workflows", json!({})).await;
        assert!(document.get("error").is_some(), "{sdk:?}: {document:#}");
    }

    let alice = structured(
        &Sdk::TypeScript
            .call(&url, Some("alice-secret"), "start_mining", json!({"difficulty": 8, "blocks": 2}))
            .await,
    )
    .clone();
    assert_eq!(alice["status"], "completed");
    let id = alice["workflow_id"].as_str().unwrap();

    // Bob cannot read, cancel or list Alice's workflow: to him it does not exist.
    for (tool, arguments) in
        [("get_mining_result", json!({"workflow_id": id})), ("cancel_mining", json!({"workflow_id": id}))]
    {
        let outcome = structured(&Sdk::Python.call(&url, Some("bob-secret"), tool, arguments).await).clone();
        assert_eq!(outcome["status"], "not_found", "{tool}");
    }
    let bobs =
        structured(&Sdk::Python.call(&url, Some("bob-secret"), "list_mining_workflows", json!({})).await)
            .clone();
    assert_eq!(bobs["total"], 0);
    let alices =
        structured(&Sdk::Python.call(&url, Some("alice-secret"), "list_mining_workflows", json!({})).await)
            .clone();
    assert_eq!(alices["workflows"][0]["workflow_id"], id);
    let api: Api<MiningWorkflow> = ns.api();
    assert!(!api.get(id).await.unwrap().spec.cancel, "bob's cancel did not reach alice's workflow");
    // The same idempotency key from two callers makes two workflows.
    let key = json!({"difficulty": 8, "blocks": 1, "idempotency_key": "same"});
    let a = structured(&Sdk::TypeScript.call(&url, Some("alice-secret"), "start_mining", key.clone()).await)
        .clone();
    let b = structured(&Sdk::TypeScript.call(&url, Some("bob-secret"), "start_mining", key).await).clone();
    assert_ne!(a["workflow_id"], b["workflow_id"]);

    // A rotated tokens file is picked up without a restart.
    std::fs::write(&path, "carol-secret carol\n").unwrap();
    eventually("the new token to work", Duration::from_secs(10), || async {
        (frontend.post_mcp("localhost", &["Authorization: Bearer carol-secret"], TOOLS_LIST).await.0 == 200)
            .then_some(())
    })
    .await;
    assert_eq!(
        frontend.post_mcp("localhost", &["Authorization: Bearer alice-secret"], TOOLS_LIST).await.0,
        401
    );
    // Revoking carol in an edit that also breaks another line: the re-read
    // applies every valid line, so the very next request is refused.
    std::fs::write(&path, "carol-secret carol\ndave-secret dave\n").unwrap();
    assert_eq!(
        frontend.post_mcp("localhost", &["Authorization: Bearer dave-secret"], TOOLS_LIST).await.0,
        200
    );
    std::fs::write(&path, "this line is broken\ndave-secret dave\n").unwrap();
    assert_eq!(
        frontend.post_mcp("localhost", &["Authorization: Bearer carol-secret"], TOOLS_LIST).await.0,
        401
    );
    assert_eq!(
        frontend.post_mcp("localhost", &["Authorization: Bearer dave-secret"], TOOLS_LIST).await.0,
        200
    );
}

#[tokio::test]
async fn a_callers_running_workflows_are_limited() {
    let ns = TestNamespace::new("mcp-limit").await;
    install_crd(&ns.client).await;
    // No operator: started workflows stay unfinished.
    let frontend = FrontendProcess::start(&ns.name, &["--max-running-per-caller", "2"]).await;
    let url = frontend.url();
    for _ in 0..2 {
        let outcome =
            structured(&Sdk::TypeScript.call(&url, None, "start_mining", json!({"wait_seconds": 0})).await)
                .clone();
        assert_eq!(outcome["status"], "running");
    }
    let refused = Sdk::Python.call(&url, None, "start_mining", json!({"wait_seconds": 0})).await;
    assert_eq!(refused["result"]["isError"], true, "{refused:#}");
    assert!(refused["result"]["content"][0]["text"].as_str().unwrap().contains("the limit is 2"));
    let api: Api<MiningWorkflow> = ns.api();
    assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 2);
}

/// A client of the test cluster that authenticates with `token` alone.
async fn client_with_token(token: &str) -> kube::Client {
    let mut config = kube::Config::infer().await.expect("a kubeconfig");
    config.auth_info = kube::config::AuthInfo { token: Some(token.to_string().into()), ..Default::default() };
    kube::Client::try_from(config).expect("a client")
}

#[tokio::test]
async fn kubernetes_tokens_are_reviewed_and_rbac_decides_who_may_mine() {
    let ns = TestNamespace::new("mcp-kube-auth").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    // Callers' accounts live apart from the workflows (tool Pods run there).
    let callers = TestNamespace::new("mcp-kube-callers").await;
    let agent = service_account_token(&callers, "agent").await;
    let stranger = service_account_token(&callers, "stranger").await;
    // Finding 1 of the tool boundary: an account of the workflow namespace,
    // bound as a caller (as NOTES said before), is one any Pod there can act as.
    let insider = service_account_token(&ns, "insider").await;
    // Only `agent` may use the MCP tools here: the chart's -mcp-caller rule.
    let roles: Api<Role> = ns.api();
    let mut role = Role::default();
    role.metadata.name = Some("miner".into());
    role.rules = Some(vec![mcp_caller_rule()]);
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<RoleBinding> = ns.api();
    let mut binding = RoleBinding::default();
    binding.metadata.name = Some("agent-mines".into());
    binding.role_ref =
        RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name: "miner".into() };
    binding.subjects = Some(
        [("agent", &callers.name), ("insider", &ns.name)]
            .map(|(name, namespace)| Subject {
                kind: "ServiceAccount".into(),
                name: name.into(),
                namespace: Some(namespace.clone()),
                ..Default::default()
            })
            .to_vec(),
    );
    bindings.create(&PostParams::default(), &binding).await.unwrap();

    let frontend = FrontendProcess::start(&ns.name, &["--auth", "kubernetes"]).await;
    let url = frontend.url();
    let mined = structured(
        &Sdk::Python.call(&url, Some(&agent), "start_mining", json!({"difficulty": 8, "blocks": 2})).await,
    )
    .clone();
    assert_eq!(mined["status"], "completed", "{mined:#}");

    let (code, _, body) =
        frontend.post_mcp("localhost", &[&format!("Authorization: Bearer {stranger}")], TOOLS_LIST).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("may not use the MCP tools"), "{body}");
    assert!(!body.contains("stranger"), "a refusal never names the caller: {body}");

    // Bound, yet an account of the namespace where tool Pods run: refused,
    // and the refusal says where callers belong.
    let (code, _, body) =
        frontend.post_mcp("localhost", &[&format!("Authorization: Bearer {insider}")], TOOLS_LIST).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("cannot be MCP callers"), "{body}");
    assert!(!body.contains("insider"), "a refusal never names the caller: {body}");

    // A token of the same account for the API server's own audience (what
    // `kubectl create token` mints without --audience) is refused here.
    let unbound = account_token(&callers.client, &callers.name, "agent", None).await;
    let (code, head, _) =
        frontend.post_mcp("localhost", &[&format!("Authorization: Bearer {unbound}")], TOOLS_LIST).await;
    assert_eq!(code, 401, "{head}");
    assert!(head.contains("invalid_token"), "{head}");

    // The token the frontend accepts cannot be replayed against the API
    // server: minted for the frontend's audience, it is not authenticated.
    let replayed: Api<MiningWorkflow> = Api::namespaced(client_with_token(&agent).await, &ns.name);
    match replayed.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 401, "{status:?}"),
        other => panic!("expected 401 from the API server, got {other:?}"),
    }
    // And the permission to use the tools is no access to MiningWorkflows:
    // with the account's API-server token, RBAC refuses every verb on them.
    let agent_client = client_with_token(&unbound).await;
    let as_agent: Api<MiningWorkflow> = Api::namespaced(agent_client, &ns.name);
    let id = mined["workflow_id"].as_str().unwrap();
    let workflow: MiningWorkflow = serde_json::from_value(
        json!({"apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": "direct"}, "spec": {"difficulty": 1}}),
    )
    .unwrap();
    let patch = kube::api::Patch::Merge(json!({"spec": {"cancel": true}}));
    let refusals = [
        ("get", as_agent.get(id).await.err()),
        ("list", as_agent.list(&Default::default()).await.err()),
        ("create", as_agent.create(&PostParams::default(), &workflow).await.err()),
        ("patch", as_agent.patch(id, &Default::default(), &patch).await.err()),
        ("patch status", as_agent.patch_status(id, &Default::default(), &patch).await.err()),
        ("replace", as_agent.replace(id, &PostParams::default(), &workflow).await.err()),
        ("delete", as_agent.delete(id, &Default::default()).await.err()),
    ];
    for (verb, error) in refusals {
        match error {
            Some(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{verb}: {status:?}"),
            other => panic!("{verb}: expected 403 from the API server, got {other:?}"),
        }
    }
    let watch = as_agent.watch(&Default::default(), "0").await.err();
    assert!(matches!(watch, Some(kube::Error::Api(ref s)) if s.code == 403), "watch: {watch:?}");
    let forged = &agent[..agent.len() - 8];
    assert_eq!(
        frontend.post_mcp("localhost", &[&format!("Authorization: Bearer {forged}")], TOOLS_LIST).await.0,
        401
    );
    assert_eq!(frontend.post_mcp("localhost", &[], TOOLS_LIST).await.0, 401);
}
