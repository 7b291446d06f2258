//! `--auth oidc` with the Kubernetes API server as the OpenID issuer: its
//! ServiceAccount tokens, minted for the frontend's audience, are JWTs the
//! frontend checks itself (keys from `/openid/v1/jwks`, no TokenReview).
//! Tokens for another audience, expired, signed by another key, `alg: none`
//! or from another issuer get 401 `invalid_token` with the reason and the
//! Protected Resource Metadata's address; a token without a required scope
//! gets 403 `insufficient_scope`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cluster_tests::mcp::{FrontendProcess, Sdk, inspector, structured};
use cluster_tests::{
    OperatorProcess, TestNamespace, account_token, install_crd, is_local_cluster, repo_root,
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
const ISSUER: &str = "https://kubernetes.default.svc";
const AUDIENCE: &str = "mining-operator-oidc";

async fn service_account(ns: &TestNamespace, name: &str) {
    let accounts: Api<ServiceAccount> = ns.api();
    let mut account = ServiceAccount::default();
    account.metadata.name = Some(name.into());
    accounts.create(&PostParams::default(), &account).await.unwrap();
}

/// (header, claims) of a JWT, unverified.
fn parts(token: &str) -> (Value, Value) {
    let mut segments = token.split('.');
    let mut decode =
        || serde_json::from_slice(&URL_SAFE_NO_PAD.decode(segments.next().unwrap()).unwrap()).unwrap();
    (decode(), decode())
}

/// `claims` signed with the PEM key at `key`, under the real token's `kid`.
fn sign(kid: &str, claims: &Value, key: &std::path::Path) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.into());
    let key = EncodingKey::from_rsa_pem(&std::fs::read(key).unwrap()).unwrap();
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

/// The local cluster's ServiceAccount signing key (next to its kubeconfig).
fn cluster_signing_key() -> Option<std::path::PathBuf> {
    let kubeconfig = std::path::PathBuf::from(std::env::var_os("KUBECONFIG")?);
    let key = kubeconfig.parent()?.join("sa.key");
    (is_local_cluster() && key.exists()).then_some(key)
}

/// The `WWW-Authenticate` line of a response head.
fn challenge(head: &str) -> String {
    head.lines()
        .find(|line| line.to_ascii_lowercase().starts_with("www-authenticate:"))
        .unwrap_or_else(|| panic!("no challenge in {head}"))
        .to_string()
}

#[tokio::test]
async fn the_api_server_as_issuer_admits_its_tokens_for_our_audience_and_refuses_the_rest() {
    let ns = TestNamespace::new("mcp-oidc").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start(
        &ns.name,
        &["--auth", "oidc", "--oidc-issuer", ISSUER, "--oidc-audience", AUDIENCE, "--oidc-kubernetes-keys"],
    )
    .await;
    let url = frontend.url();
    let metadata_url = "http://localhost/.well-known/oauth-protected-resource/mcp";
    service_account(&ns, "agent").await;
    service_account(&ns, "other").await;

    // The Protected Resource Metadata (RFC 9728 §2: `resource` is required;
    // `authorization_servers` is what a host signs in with), at the path
    // inserted before /mcp and at the bare one.
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let (code, head, body) = frontend.request("GET", path, &[], "").await;
        assert_eq!(code, 200, "{path}: {head}");
        let document: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(document["resource"], "http://localhost/mcp", "{document}");
        assert_eq!(document["authorization_servers"], json!([ISSUER]));
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    }
    assert_eq!(frontend.request("GET", "/.well-known/oauth-protected-resource/other", &[], "").await.0, 404);

    // No token: 401 that points to the metadata, with no error code (RFC 6750 §3.1).
    let (code, head, _) = frontend.post_mcp("localhost", &[], TOOLS_LIST).await;
    assert_eq!(code, 401);
    let line = challenge(&head);
    assert!(line.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{line}");
    assert!(!line.contains("error="), "{line}");

    // A token the API server minted for our audience mines, as its account.
    let token = account_token(&ns.client, &ns.name, "agent", Some(AUDIENCE)).await;
    let started = structured(
        &Sdk::TypeScript
            .call(&url, Some(&token), "start_mining", json!({"difficulty": 8, "blocks": 2}))
            .await,
    )
    .clone();
    assert_eq!(started["status"], "completed", "{started:#}");
    assert_eq!(started["result"]["blocks"].as_array().unwrap().len(), 2);
    let id = started["workflow_id"].as_str().unwrap();
    // Another account is another caller: the workflow does not exist for it.
    let other = account_token(&ns.client, &ns.name, "other", Some(AUDIENCE)).await;
    let seen = structured(
        &Sdk::Python.call(&url, Some(&other), "get_mining_result", json!({"workflow_id": id})).await,
    )
    .clone();
    assert_eq!(seen["status"], "not_found");
    let listed =
        structured(&Sdk::Python.call(&url, Some(&other), "list_mining_workflows", json!({})).await).clone();
    assert_eq!(listed["total"], 0);

    // The Inspector CLI: with the token as a header it works; without one it
    // meets the 401 and wants to sign the user in, which needs a terminal.
    let header = format!("Authorization: Bearer {token}");
    let (ok, listed, output) = inspector(&url, &["--method", "tools/list", "--header", &header]).await;
    assert!(ok && listed["tools"].as_array().is_some_and(|tools| !tools.is_empty()), "{output}");
    let (ok, _, output) = inspector(&url, &["--method", "tools/list"]).await;
    assert!(!ok && output.contains("auth_required"), "the Inspector without a token: {output}");

    // Tokens of the same issuer for other audiences: another server's, and
    // the API server's own (which would be a cluster credential).
    let mut refused = vec![
        (
            "another audience",
            account_token(&ns.client, &ns.name, "agent", Some("someone-else")).await,
            "(aud)",
        ),
        ("the API server's audience", account_token(&ns.client, &ns.name, "agent", None).await, "(aud)"),
    ];
    let (header, claims) = parts(&token);
    let kid = header["kid"].as_str().expect("Kubernetes tokens name their key");
    // `alg: none` with the real token's claims.
    let none_header = URL_SAFE_NO_PAD.encode(json!({"alg": "none", "kid": kid}).to_string());
    let body = token.split('.').nth(1).unwrap();
    refused.push(("alg none", format!("{none_header}.{body}."), "not a signed JWT"));
    // The real claims signed by another key under the real kid.
    let other_key = repo_root().join("mcp-frontend/src/auth/testdata/other-rsa.pem");
    refused.push(("another key", sign(kid, &claims, &other_key), "signature does not verify"));
    if let Some(cluster_key) = cluster_signing_key() {
        // Signed with the issuer's own key, but expired, or naming another issuer.
        let mut expired = claims.clone();
        let now = claims["iat"].as_i64().unwrap();
        expired["iat"] = json!(now - 7200);
        expired["nbf"] = json!(now - 7200);
        expired["exp"] = json!(now - 3600);
        refused.push(("expired", sign(kid, &expired, &cluster_key), "expired"));
        let mut foreign = claims.clone();
        foreign["iss"] = json!("https://evil.example.com");
        refused.push(("another issuer", sign(kid, &foreign, &cluster_key), "another issuer"));
        // The control: the issuer's key with unchanged claims is accepted, so
        // the refusals above are for what was changed.
        let resigned = sign(kid, &claims, &cluster_key);
        let authorization = format!("Authorization: Bearer {resigned}");
        assert_eq!(frontend.post_mcp("localhost", &[&authorization], TOOLS_LIST).await.0, 200);
    }
    for (what, bad, reason) in &refused {
        let authorization = format!("Authorization: Bearer {bad}");
        let (code, head, body) = frontend.post_mcp("localhost", &[&authorization], TOOLS_LIST).await;
        assert_eq!(code, 401, "{what}: {head}{body}");
        let line = challenge(&head);
        assert!(line.contains("error=\"invalid_token\""), "{what}: {line}");
        assert!(line.contains(reason), "{what}: {line}");
        assert!(line.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{what}: {line}");
    }
    assert!(is_local_cluster() == (refused.len() == 6), "the signed refusals ran on the local cluster");
    // The SDK client reports the refusal as an error.
    let document = Sdk::TypeScript.call(&url, Some(&refused[0].1), "list_mining_workflows", json!({})).await;
    assert!(document.get("error").is_some(), "{document:#}");
    drop(frontend);

    // With a required scope, a valid token without it gets 403 insufficient_scope.
    let scoped = FrontendProcess::start(
        &ns.name,
        &[
            "--auth",
            "oidc",
            "--oidc-issuer",
            ISSUER,
            "--oidc-audience",
            AUDIENCE,
            "--oidc-kubernetes-keys",
            "--oidc-required-scopes",
            "mining",
            "--public-url",
            "https://mcp.example.com/mcp",
        ],
    )
    .await;
    let authorization = format!("Authorization: Bearer {token}");
    let (code, head, _) = scoped.post_mcp("localhost", &[&authorization], TOOLS_LIST).await;
    assert_eq!(code, 403, "{head}");
    let line = challenge(&head);
    assert!(line.contains("error=\"insufficient_scope\"") && line.contains("scope=\"mining\""), "{line}");
    assert!(
        line.contains(
            "resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""
        ),
        "{line}"
    );
    let (_, _, body) = scoped.request("GET", "/.well-known/oauth-protected-resource/mcp", &[], "").await;
    let document: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(document["resource"], "https://mcp.example.com/mcp");
    assert_eq!(document["scopes_supported"], json!(["mining"]));
}
