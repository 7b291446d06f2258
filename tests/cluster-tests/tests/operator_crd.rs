//! The generated CRD as the real API server sees it.

use cluster_tests::{TestNamespace, install_crd};
use kube::api::{Api, PostParams};
use mining_api::MiningWorkflow;
use serde_json::json;

#[tokio::test]
async fn the_api_server_accepts_the_crd_and_rejects_out_of_range_specs() {
    let ns = TestNamespace::new("crd").await;
    install_crd(&ns.client).await;
    let workflows: Api<MiningWorkflow> = ns.api();
    let create = |spec: serde_json::Value| {
        let workflows = workflows.clone();
        async move {
            let body: MiningWorkflow = serde_json::from_value(json!({
                "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
                "metadata": {"name": "w"}, "spec": spec,
            }))
            .unwrap();
            workflows.create(&PostParams { dry_run: true, ..Default::default() }, &body).await
        }
    };
    let accepted = create(json!({"difficulty": 8})).await.expect("a valid spec is accepted");
    assert_eq!(accepted.spec.blocks, mining_api::bounds::DEFAULT_BLOCKS, "the server applies the default");

    for (spec, field) in [
        (json!({"difficulty": 0}), "spec.difficulty"),
        (json!({"difficulty": 65}), "spec.difficulty"),
        (json!({"difficulty": 8, "blocks": 0}), "spec.blocks"),
        (json!({"difficulty": 8, "blocks": 65}), "spec.blocks"),
    ] {
        let err = create(spec.clone()).await.expect_err("out of range");
        let kube::Error::Api(status) = err else { panic!("{spec}: not an API error: {err}") };
        assert_eq!(status.code, 422, "{spec}");
        assert!(status.message.contains(field), "{spec}: {}", status.message);
    }
}
