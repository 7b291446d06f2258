//! The trust boundary of a chart install, attacked for real. The MCP
//! workflows live in a workflow namespace; the trust roots (the ownership
//! key, the operator's leader Lease, the callers' quota ledgers, our
//! ServiceAccounts) in the release namespace. Someone with every right in
//! the workflow namespace (more than the built-in `edit`) reaches none of
//! them, so cannot forge proofs, restore an old ledger to start again, run
//! as our components, or stop the election; and the frontend's own account
//! may read the leader Lease but never hold it.
//!
//! Before the split, workflows lived in the release namespace: the same
//! namespace-wide rights read the key, replaced ledgers and updated the
//! leader Lease (docs/SECURITY.md, attacks 2 and 6).

use std::time::Duration;

use cluster_tests::release::Release;
use cluster_tests::{TOKEN_AUDIENCE, account_token, assert_reference_chain, eventually};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use mining_api::{MiningLedger, MiningWorkflow};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A client that acts as `user` (impersonated by the test's admin).
async fn client_as(user: &str) -> kube::Client {
    let mut config = kube::Config::infer().await.expect("a kubeconfig");
    config.auth_info.impersonate = Some(user.to_string());
    kube::Client::try_from(config).expect("a client")
}

/// Whether the API server refused the call for want of rights.
fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> bool {
    match result {
        Err(kube::Error::Api(status)) => status.code == 403,
        other => panic!("expected a 403, got {other:?}"),
    }
}

#[ignore = "needs the local cluster, whose node agent maps the chart's images; tests/run.sh runs it there"]
#[tokio::test]
async fn every_right_in_the_workflow_namespace_reaches_no_trust_root_and_the_frontend_cannot_hold_the_leader_lease()
 {
    let release =
        Release::install("trust", &["--set", "frontend.replicas=1", "--set", "operator.replicas=1"]).await;
    let (trust, work) = (&release.ns, &release.work);

    // An MCP caller mines; its ledger is kept in the release namespace, not beside the workflows.
    let token = release.user_token("agent").await;
    let outcome = release.mine(&token, json!({"difficulty": 8, "blocks": 1, "wait_seconds": 20})).await;
    assert_reference_chain(&outcome, 1, 8);
    let ledgers = trust.api::<MiningLedger>().list(&ListParams::default()).await.unwrap().items;
    assert_eq!(ledgers.len(), 1, "one ledger, in the release namespace");
    assert!(work.api::<MiningLedger>().list(&ListParams::default()).await.unwrap().items.is_empty());
    let saved = ledgers[0].clone();
    let ledger_name = saved.metadata.name.clone().unwrap();

    // Mallory may do anything to anything in the workflow namespace.
    let everything: Role = serde_json::from_value(json!({
        "metadata": {"name": "everything"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }))
    .unwrap();
    work.api::<Role>().create(&PostParams::default(), &everything).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "mallory"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "everything"},
        "subjects": [{"kind": "ServiceAccount", "name": "mallory", "namespace": work.name}],
    }))
    .unwrap();
    work.api::<RoleBinding>().create(&PostParams::default(), &binding).await.unwrap();
    let mallory = client_as(&format!("system:serviceaccount:{}:mallory", work.name)).await;
    // Those rights are real: she reads the workflows and Secrets of the workflow namespace.
    let her_workflows = Api::<MiningWorkflow>::namespaced(mallory.clone(), &work.name);
    eventually("mallory's rights in the workflow namespace to take effect", TIMEOUT, || async {
        her_workflows.list(&ListParams::default()).await.ok().map(|_| ())
    })
    .await;
    Api::<Secret>::namespaced(mallory.clone(), &work.name).list(&ListParams::default()).await.unwrap();

    // The trust roots are beyond her: the ownership key...
    let secrets = Api::<Secret>::namespaced(mallory.clone(), &trust.name);
    assert!(forbidden(secrets.get(&format!("{}-ownership", release.frontend())).await));
    assert!(forbidden(secrets.list(&ListParams::default()).await));
    // ...the ledgers (a saved one cannot be put back to start again)...
    let her_ledgers = Api::<MiningLedger>::namespaced(mallory.clone(), &trust.name);
    assert!(forbidden(her_ledgers.get(&ledger_name).await));
    assert!(forbidden(her_ledgers.replace(&ledger_name, &PostParams::default(), &saved).await));
    assert!(forbidden(her_ledgers.delete(&ledger_name, &Default::default()).await));
    // ...the leader Lease...
    let leader = format!("{}-operator", release.fullname());
    let lease = trust.api::<Lease>().get(&leader).await.unwrap();
    let her_leases = Api::<Lease>::namespaced(mallory.clone(), &trust.name);
    assert!(forbidden(her_leases.replace(&leader, &PostParams::default(), &lease).await));
    // ...and our ServiceAccounts: she can run no Pod beside them.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "as-the-frontend"},
        "spec": {"serviceAccountName": release.frontend(),
                 "containers": [{"name": "c", "image": "localhost/mining-operator/miner:dev"}]},
    }))
    .unwrap();
    assert!(forbidden(
        Api::<Pod>::namespaced(mallory.clone(), &trust.name).create(&PostParams::default(), &pod).await
    ));
    assert!(forbidden(
        Api::<ServiceAccount>::namespaced(mallory, &trust.name).list(&ListParams::default()).await
    ));

    // The frontend's own account reads the leader Lease and cannot take it.
    let frontend = client_as(&format!("system:serviceaccount:{}:{}", trust.name, release.frontend())).await;
    let its_leases = Api::<Lease>::namespaced(frontend.clone(), &trust.name);
    let read = its_leases.get(&leader).await.expect("the frontend may read the leader Lease");
    assert!(forbidden(its_leases.replace(&leader, &PostParams::default(), &read).await));
    let squat: Lease = serde_json::from_value(json!({"metadata": {"name": "squat"}})).unwrap();
    assert!(forbidden(its_leases.create(&PostParams::default(), &squat).await));
    // Its ledgers are its own to keep.
    Api::<MiningLedger>::namespaced(frontend, &trust.name).get(&ledger_name).await.unwrap();

    // A caller bound where releases before the split told admins to bind
    // them (the release namespace) still gets in after the upgrade.
    let veteran: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "veteran"}})).unwrap();
    trust.api::<ServiceAccount>().create(&PostParams::default(), &veteran).await.unwrap();
    let old_binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "veteran"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": format!("{}-mcp-caller", release.fullname())},
        "subjects": [{"kind": "ServiceAccount", "name": "veteran", "namespace": trust.name}],
    }))
    .unwrap();
    trust.api::<RoleBinding>().create(&PostParams::default(), &old_binding).await.unwrap();
    let old_token = account_token(&trust.client, &trust.name, "veteran", Some(TOKEN_AUDIENCE)).await;
    let listed = release.call(&old_token, "list_mining_workflows", json!({})).await;
    assert!(listed["result"]["structuredContent"]["workflows"].is_array(), "{listed:#}");

    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
}
