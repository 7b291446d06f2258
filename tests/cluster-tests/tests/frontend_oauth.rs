//! `--auth oidc` behind a real OpenID provider (the certified `oidc-provider`
//! package on loopback), signed in to by the official TypeScript SDK's OAuth
//! client the way MCP hosts do: our 401 → its `resource_metadata` → the
//! Protected Resource Metadata → the provider's metadata → dynamic client
//! registration → authorization code with PKCE and `resource` (a scripted
//! person signs in and consents) → a JWT for our audience → the tool call.

use std::process::Stdio;
use std::time::Duration;

use cluster_tests::mcp::{
    FrontendProcess, client_script, clients_dir, collect, free_port, node22, structured,
};
use cluster_tests::{OperatorProcess, TestNamespace, eventually, install_crd};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The provider, killed when dropped; `issuer` once it listens.
struct OpenIdProvider {
    child: tokio::process::Child,
    issuer: String,
}

impl OpenIdProvider {
    /// Starts one with a fresh signing key on `port` (0: any free one).
    async fn start(port: u16) -> Self {
        let mut child = tokio::process::Command::new(node22())
            .arg("oidc-provider.mjs")
            .arg(port.to_string())
            .current_dir(clients_dir())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start oidc-provider (tests/mcp-clients/install.sh installs it)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the provider to listen within 30 s")
            .unwrap()
            .expect("the provider's first line");
        let issuer = serde_json::from_str::<Value>(&line).unwrap()["issuer"].as_str().unwrap().to_string();
        // Keep reading: a closed pipe would kill the provider at its next write.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { child, issuer }
    }

    async fn stop(mut self) {
        self.child.kill().await.expect("stop the provider");
    }
}

/// An SDK's OAuth client (`ts-oauth.mjs` or `py_oauth.py`), signing in as
/// `login`, calling `tool`.
async fn oauth_call(script: &str, url: &str, login: &str, tool: &str, arguments: Value) -> Value {
    let mut command = client_script(script, url, None, false, &["call", tool, &arguments.to_string()]);
    command.env("MCP_LOGIN", login);
    collect(script, command.spawn().expect("start the OAuth client")).await
}

#[tokio::test]
async fn the_typescript_sdk_signs_in_through_our_metadata_and_mines() {
    let ns = TestNamespace::new("mcp-oauth").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let provider = OpenIdProvider::start(0).await;
    let addrs = (free_port(), free_port());
    let resource = format!("http://{}/mcp", addrs.0);
    // The required scope is what the SDKs ask the provider for (they take it
    // from the challenge and the metadata's scopes_supported).
    let args = [
        "--auth",
        "oidc",
        "--oidc-issuer",
        &provider.issuer,
        "--oidc-audience",
        &resource,
        "--oidc-required-scopes",
        "mining",
    ];
    let frontend =
        FrontendProcess::start_at(addrs, &ns.name, args.iter().map(|a| a.to_string()).collect()).await;
    assert_eq!(frontend.url(), resource);

    let alice =
        oauth_call(TS, &resource, "alice", "start_mining", json!({"difficulty": 8, "blocks": 2})).await;
    let trace = alice["trace"].as_array().unwrap_or_else(|| panic!("{alice:#}"));
    let started = structured(&alice).clone();
    assert_eq!(started["status"], "completed", "{alice:#}");

    // What the client did, in order: met our 401 and its challenge, read the
    // metadata it named, found the provider, registered, got a token, called.
    let position = |what: &str, found: &dyn Fn(&Value) -> bool| {
        trace.iter().position(found).unwrap_or_else(|| panic!("no {what} in {trace:#?}"))
    };
    let metadata_url = format!("http://{}/.well-known/oauth-protected-resource/mcp", addrs.0);
    let challenged = position("401 with resource_metadata", &|e| {
        e["status"] == 401
            && e["www_authenticate"]
                .as_str()
                .is_some_and(|c| c.contains(&format!("resource_metadata=\"{metadata_url}\"")))
    });
    let metadata = position("the metadata", &|e| e["url"] == metadata_url.as_str() && e["status"] == 200);
    let provider_metadata = position("the provider's metadata", &|e| {
        e["url"].as_str().is_some_and(|u| u.starts_with(&provider.issuer) && u.contains("/.well-known/"))
            && e["status"] == 200
    });
    let registered =
        position("registration", &|e| e["url"] == format!("{}/reg", provider.issuer) && e["status"] == 201);
    let token =
        position("the token", &|e| e["url"] == format!("{}/token", provider.issuer) && e["status"] == 200);
    let called = position("an admitted call", &|e| e["url"] == resource.as_str() && e["status"] == 200);
    assert!(challenged < metadata && metadata < provider_metadata && provider_metadata < registered);
    assert!(registered < token && token < called, "{trace:#?}");
    // The authorization request named us as the resource (RFC 8707) with PKCE,
    // and the token is a JWT for exactly us.
    let authorization = alice["authorization_url"].as_str().unwrap();
    assert!(authorization.contains("code_challenge_method=S256"), "{authorization}");
    assert!(authorization.contains("scope=mining"), "{authorization}");
    assert!(authorization.contains(&format!("resource={}", urlencode(&resource))), "{authorization}");
    assert_eq!(alice["token"]["aud"], resource.as_str());
    assert_eq!(alice["token"]["iss"], provider.issuer.as_str());
    assert_eq!(alice["token"]["sub"], "alice");
    assert_eq!(alice["token"]["scope"], "mining");

    // Bob signs in as himself: alice's workflow is not his to see.
    let id = started["workflow_id"].as_str().unwrap();
    let bob = oauth_call(TS, &resource, "bob", "get_mining_result", json!({"workflow_id": id})).await;
    assert_eq!(structured(&bob)["status"], "not_found", "{bob:#}");
    let bobs = oauth_call(TS, &resource, "bob", "list_mining_workflows", json!({})).await;
    assert_eq!(structured(&bobs)["total"], 0);
    let alices = oauth_call(TS, &resource, "alice", "list_mining_workflows", json!({})).await;
    assert_eq!(structured(&alices)["workflows"][0]["workflow_id"], id);

    // The Python SDK's OAuth client signs in through the same discovery.
    let carol =
        oauth_call("py_oauth.py", &resource, "carol", "start_mining", json!({"difficulty": 8, "blocks": 1}))
            .await;
    assert_eq!(structured(&carol)["status"], "completed", "{carol:#}");
    assert_eq!(carol["token"]["aud"], resource.as_str());
    assert_eq!(carol["token"]["sub"], "carol");
    let requests = carol["requests"].as_array().unwrap();
    assert!(requests.iter().any(|r| r[1] == metadata_url.as_str() && r[2] == 200), "{requests:#?}");
    assert!(
        requests.iter().any(|r| r[0] == "POST" && r[1] == resource.as_str() && r[2] == 401),
        "{requests:#?}"
    );

    // The provider rotates its key (restarted on its address with a new one
    // under a new kid): the first token naming the new kid makes the frontend
    // fetch the new key set (at most every 10 s; until then such tokens are
    // refused as signed by a key the issuer does not publish), after which
    // signing in works again, as the same caller.
    let port: u16 = provider.issuer.rsplit(':').next().unwrap().parse().unwrap();
    let issuer = provider.issuer.clone();
    provider.stop().await;
    let rotated = OpenIdProvider::start(port).await;
    assert_eq!(rotated.issuer, issuer);
    let after = eventually("a token of the rotated key to be admitted", Duration::from_secs(40), || async {
        let document = oauth_call(TS, &resource, "alice", "list_mining_workflows", json!({})).await;
        document["result"]["structuredContent"].is_object().then_some(document)
    })
    .await;
    assert_eq!(structured(&after)["workflows"][0]["workflow_id"], id, "the same caller after the rotation");
    rotated.stop().await;
}

const TS: &str = "ts-oauth.mjs";

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
