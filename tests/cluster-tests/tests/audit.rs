//! Who holds every caller's runs (red team, round 5): `kubectl mining audit`
//! and the frontend's periodic audit, against the real API server's RBAC
//! (the aggregated `edit` ClusterRole included) and SubjectAccessReviews.
//! Other tests may install the chart cluster-wide at the same time, so
//! ServiceAccounts of other namespaces may come and go in the list: what
//! is asserted is every person this test binds, and that nobody else but
//! such accounts is ever listed.

use std::process::Command;
use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, release_binary};
use cluster_tests::{TestNamespace, eventually, install_crd};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;

/// `kubectl-mining audit -n NS --product-namespace PRODUCT ARGS`: (exit code, stdout, stderr).
fn audit(ns: &str, product: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(release_binary("kubectl-mining"))
        .args(["audit", "-n", ns, "--product-namespace", product])
        .args(args)
        .output()
        .expect("kubectl-mining runs");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// The findings of an audit as JSON, asserting the exit code says whether any.
fn findings(ns: &str, product: &str) -> Vec<Value> {
    let (code, stdout, stderr) = audit(ns, product, &["-o", "json"]);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{code} {stdout}{stderr}"));
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    assert_eq!(code, if findings.is_empty() { 0 } else { 3 }, "{stdout}{stderr}");
    assert_eq!(report["complete"], true, "{report}");
    findings
}

/// The persons (not ServiceAccounts: other tests' installs) among `findings`.
fn persons(findings: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = findings
        .iter()
        .filter(|f| f["subject"]["kind"] != "ServiceAccount")
        .map(|f| f["subject"]["name"].as_str().unwrap_or_default().to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

fn user(name: &str) -> Subject {
    Subject {
        kind: "User".into(),
        name: name.into(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        ..Default::default()
    }
}

async fn bind(ns: &TestNamespace, name: &str, kind: &str, role: &str, subject: Subject) {
    let mut binding = RoleBinding::default();
    binding.metadata.name = Some(name.into());
    binding.role_ref =
        RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: kind.into(), name: role.into() };
    binding.subjects = Some(vec![subject]);
    ns.api::<RoleBinding>().create(&PostParams::default(), &binding).await.unwrap();
}

#[tokio::test]
async fn the_audit_lists_who_holds_the_runs_and_the_frontend_warns_when_that_changes() {
    let ns = TestNamespace::new("audit").await;
    install_crd(&ns.client).await;
    let product = TestNamespace::new("audit-product").await;
    // `edit` is aggregated: its rules come from the control plane.
    let edit: ClusterRole = Api::all(ns.client.clone()).get("edit").await.unwrap();
    assert!(edit.rules.is_some_and(|r| !r.is_empty()), "the ClusterRole aggregation controller fills `edit`");
    // The product's own account may do anything there: never listed.
    let own = Subject {
        kind: "ServiceAccount".into(),
        name: "frontend".into(),
        namespace: Some(product.name.clone()),
        ..Default::default()
    };
    bind(&ns, "product-edit", "ClusterRole", "edit", own).await;
    let frontend = FrontendProcess::start(
        &ns.name,
        &["--audit-interval-seconds", "1", "--product-namespace", &product.name],
    )
    .await;

    // A default namespace: no person holds its runs.
    let before = findings(&ns.name, &product.name);
    assert_eq!(persons(&before), Vec::<String>::new(), "{before:?}");
    assert!(
        before.iter().all(|f| f["subject"]["namespace"] != product.name.as_str()),
        "the product's own account is not listed: {before:?}"
    );
    eventually("the frontend's first audit", Duration::from_secs(30), || async {
        (frontend.metric("mcp_frontend_namespace_reach_subjects").await >= 0.0).then_some(())
    })
    .await;

    // `edit` bound to a user, and a Role with only toolruns/status patch to another.
    bind(&ns, "mallory-edit", "ClusterRole", "edit", user("mallory")).await;
    let mut status_only = Role::default();
    status_only.metadata.name = Some("status-writer".into());
    status_only.rules = Some(vec![PolicyRule {
        api_groups: Some(vec![mining_api::GROUP.into()]),
        resources: Some(vec!["toolruns/status".into()]),
        verbs: vec!["patch".into()],
        ..Default::default()
    }]);
    ns.api::<Role>().create(&PostParams::default(), &status_only).await.unwrap();
    bind(&ns, "eve-status", "Role", "status-writer", user("eve")).await;

    let found = findings(&ns.name, &product.name);
    assert_eq!(persons(&found), ["eve", "mallory"], "{found:#?}");
    let of = |name: &str| found.iter().find(|f| f["subject"]["name"] == name).unwrap().clone();
    let mallory = of("mallory");
    assert_eq!(mallory["binding"], format!("RoleBinding {}/mallory-edit", ns.name));
    assert_eq!(mallory["role"], "ClusterRole edit");
    let rights: Vec<&str> = mallory["rights"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for right in ["create pods", "create pods/exec", "get secrets", "create jobs"] {
        assert!(rights.contains(&right), "{right}: {rights:?}");
    }
    let eve = of("eve");
    assert_eq!(eve["rights"], serde_json::json!(["patch toolruns/status"]), "{eve}");
    assert_eq!(eve["role"], "Role status-writer");
    let (code, table, _) = audit(&ns.name, &product.name, &[]);
    assert_eq!(code, 3);
    assert!(table.contains("User eve") && table.contains("patch toolruns/status"), "{table}");

    // Within a period the frontend says so: its metric and a warning Event.
    eventually("the frontend to count both", Duration::from_secs(30), || async {
        (frontend.metric("mcp_frontend_namespace_reach_subjects").await >= 2.0).then_some(())
    })
    .await;
    let events: Api<Event> = ns.api();
    let told = |needle: &'static str, kind: &'static str| {
        let events = events.clone();
        move || {
            let events = events.clone();
            async move {
                let listed = events.list(&Default::default()).await.ok()?;
                listed
                    .items
                    .into_iter()
                    .find(|e| {
                        e.reason.as_deref() == Some("NamespaceReachChanged")
                            && e.type_.as_deref() == Some(kind)
                            && e.note.as_deref().is_some_and(|n| n.contains(needle))
                    })
                    .map(|_| ())
            }
        }
    };
    eventually("a warning Event naming eve", Duration::from_secs(30), told("User eve", "Warning")).await;

    // The bindings removed: nobody again, and the frontend says that too.
    for name in ["mallory-edit", "eve-status"] {
        ns.api::<RoleBinding>().delete(name, &DeleteParams::default()).await.unwrap();
    }
    assert_eq!(persons(&findings(&ns.name, &product.name)), Vec::<String>::new());
    eventually("the cleared Event", Duration::from_secs(30), || async {
        let listed = events.list(&Default::default()).await.ok()?;
        listed
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("NamespaceReachChanged"))
            .max_by_key(|e| e.event_time.as_ref().map(|t| t.0))
            .filter(|e| !e.note.as_deref().unwrap_or_default().contains("User eve"))
            .map(|_| ())
    })
    .await;
}
