//! What authenticating a request costs, per `--auth` mode, against the
//! cluster in `$KUBECONFIG`:
//!
//! `cargo run --release -p cluster-tests --bin auth-bench -- [ROUNDS]`
//!
//! Three frontends on one namespace: `--auth none`, `--auth tokens` (a digest
//! lookup) and `--auth oidc` with the API server as issuer (an RS256
//! signature check against the cached key set per request, no API call).
//! `tools/list` — no API call of its own, so the check is most of the
//! difference — is sent to each in turn, ROUNDS times each (default 2000),
//! with `Connection: close`, so set-up costs cancel out of the ratios.

use std::time::Instant;

use cluster_tests::bench::summary;
use cluster_tests::mcp::{FrontendProcess, tokens_file};
use cluster_tests::{TestNamespace, account_token, install_crd};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
const AUDIENCE: &str = "auth-bench";

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(2000, |a| a.parse().expect("ROUNDS"));
    let ns = TestNamespace::new("auth-bench").await;
    install_crd(&ns.client).await;
    let accounts: Api<ServiceAccount> = ns.api();
    let mut account = ServiceAccount::default();
    account.metadata.name = Some("agent".into());
    accounts.create(&PostParams::default(), &account).await.unwrap();
    let jwt = account_token(&ns.client, &ns.name, "agent", Some(AUDIENCE)).await;
    let tokens = tokens_file("bench-secret-token-0123456789 bench\n");

    let none = FrontendProcess::start(&ns.name, &[]).await;
    let tokens_mode =
        FrontendProcess::start(&ns.name, &["--auth", "tokens", "--tokens-file", tokens.to_str().unwrap()])
            .await;
    let oidc = FrontendProcess::start(
        &ns.name,
        &[
            "--auth",
            "oidc",
            "--oidc-issuer",
            "https://kubernetes.default.svc",
            "--oidc-audience",
            AUDIENCE,
            "--oidc-kubernetes-keys",
        ],
    )
    .await;
    let jwt_header = format!("Authorization: Bearer {jwt}");
    let cases: [(&str, &FrontendProcess, Vec<&str>); 3] = [
        ("--auth none", &none, vec![]),
        ("--auth tokens", &tokens_mode, vec!["Authorization: Bearer bench-secret-token-0123456789"]),
        ("--auth oidc (RS256, API server keys)", &oidc, vec![&jwt_header]),
    ];
    let mut times = vec![Vec::with_capacity(rounds); cases.len()];
    for _ in 0..rounds {
        for (index, (name, frontend, headers)) in cases.iter().enumerate() {
            let started = Instant::now();
            let (code, _, body) = frontend.post_mcp("localhost", headers, TOOLS_LIST).await;
            times[index].push(started.elapsed().as_secs_f64() * 1e3);
            assert_eq!(code, 200, "{name}: {body}");
        }
    }
    println!("== tools/list, {rounds} rounds, alternating");
    let p50s: Vec<f64> =
        cases.iter().zip(times).map(|((name, _, _), samples)| summary(name, samples)).collect();
    println!("{:<40} {:.2}x at p50", "tokens / none", p50s[1] / p50s[0]);
    println!("{:<40} {:.2}x at p50", "oidc / none", p50s[2] / p50s[0]);
    println!("{:<40} {:.2}x at p50", "oidc / tokens", p50s[2] / p50s[1]);
}
