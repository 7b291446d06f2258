//! What anyone who may create a Pod, or edit a workflow, can make our
//! components hold in memory: their watch caches keep bounded projections,
//! so planted or padded objects cost a constant each, whatever their size.
//! (The "trust boundary" issue's finding 1, attacked as it was found.)

use std::time::Duration;

use cluster_tests::mcp::FrontendProcess;
use cluster_tests::{OperatorProcess, TestNamespace, eventually, install_crd, resident_mib};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use mining_api::{MiningWorkflow, annotations, labels};
use serde_json::json;

/// How far a component's resident memory may grow over its idle figure.
const ALLOWED_GROWTH_MIB: f64 = 50.0;
const PADDING: usize = 700 * 1024;

/// A Pending Pod of `PADDING` bytes with the label the operator's watch
/// selects, whose owner is no Job of ours (no scheduler will take it).
fn planted_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {labels::MANAGED_BY: "mining-operator", "job-name": name}},
        "spec": {
            "schedulerName": "nobody",
            "containers": [{"name": "c", "image": "planted:1",
                "env": [{"name": "PAD", "value": "x".repeat(PADDING)}]}],
        },
    }))
    .unwrap()
}

async fn create_all<K>(api: &Api<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let created = futures::stream::iter(objects)
        .map(|object| async move { api.create(&PostParams::default(), &object).await })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    for result in created {
        result.expect("create a planted object");
    }
}

/// Waits until `operator`'s Pod watch has delivered `count` objects.
async fn saw_every_pod(operator: &OperatorProcess, count: usize) {
    eventually("the operator to see every planted Pod", Duration::from_secs(120), || async {
        let seen = operator.metric(r#"mining_operator_watch_events_total{resource="pods"}"#).await;
        (seen >= count as f64).then_some(())
    })
    .await;
}

#[tokio::test]
async fn planted_pods_of_700_kib_grow_no_operator_replica_and_no_restart_relists_them_whole() {
    let ns = TestNamespace::new("bounds-pods").await;
    install_crd(&ns.client).await;
    let running = OperatorProcess::start(&ns.name, &[]);
    // Ready once its caches have synced, which a loaded machine may take a
    // moment for: waited for, not assumed.
    eventually("the operator to be ready", Duration::from_secs(60), || async {
        (running.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    let idle = resident_mib(running.pid());
    let pods: Api<Pod> = ns.api();
    create_all(&pods, (0..150).map(|i| planted_pod(&format!("planted-{i}"))).collect()).await;
    saw_every_pod(&running, 150).await;
    let grown = resident_mib(running.pid()) - idle;
    assert!(grown < ALLOWED_GROWTH_MIB, "the running replica grew {grown:.1} MiB over {idle:.1} MiB");
    // A replica that starts now lists all of them at once.
    let restarted = OperatorProcess::start(&ns.name, &[]);
    saw_every_pod(&restarted, 150).await;
    let listed = resident_mib(restarted.pid()) - idle;
    assert!(listed < ALLOWED_GROWTH_MIB, "a restarted replica holds {listed:.1} MiB over {idle:.1} MiB");
    running.assert_running();
    restarted.assert_running();
    println!(
        "operator: idle {idle:.1} MiB, +{grown:.1} MiB with 150 planted Pods, a restart +{listed:.1} MiB"
    );
}

#[tokio::test]
async fn workflows_padded_under_our_own_prefix_grow_no_frontend() {
    let ns = TestNamespace::new("bounds-padded").await;
    install_crd(&ns.client).await;
    let frontend = FrontendProcess::start(&ns.name, &[]).await;
    let idle = resident_mib(frontend.pid());
    // Our own keys, each over its bound, and as many more as fit in the
    // API server's 256 KiB of annotations.
    let padded = |i: usize| -> MiningWorkflow {
        let mut padding = serde_json::Map::new();
        padding.insert(annotations::OWNER_PROOF.into(), json!("v2.".to_string() + &"0".repeat(60_000)));
        padding.insert(annotations::PROGRESS_TOKEN.into(), json!("1".repeat(60_000)));
        for k in 0..4 {
            padding.insert(format!("mining-operator.dev/pad-{k}"), json!("p".repeat(30_000)));
        }
        serde_json::from_value(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": format!("padded-{i}"), "annotations": padding,
                "labels": {labels::CALLER: format!("{i:032x}")}},
            "spec": {"difficulty": 8, "blocks": 1},
        }))
        .unwrap()
    };
    let api: Api<MiningWorkflow> = ns.api();
    create_all(&api, (0..300).map(padded).collect()).await;
    eventually("the frontend to see every padded workflow", Duration::from_secs(120), || async {
        let seen = frontend.metric("mcp_frontend_watch_events_total").await;
        (seen >= 300.0).then_some(())
    })
    .await;
    let grown = resident_mib(frontend.pid()) - idle;
    assert!(grown < ALLOWED_GROWTH_MIB, "the frontend grew {grown:.1} MiB over {idle:.1} MiB");
    println!("frontend: idle {idle:.1} MiB, +{grown:.1} MiB with 300 padded workflows (~240 KiB each)");
}
