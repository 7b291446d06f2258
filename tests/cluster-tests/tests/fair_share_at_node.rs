//! Fair share where the work runs (issue #69): the operator's budget (50
//! workflows) is far larger than the local node (8 Pods). The namespace's
//! direct creators fill the queue with 55 workflows whose second block
//! takes "days"; the node fills, and the rest of their Pods wait there.
//! Then a new MCP caller's difficulty-4 block, and later its call of a
//! preemptible tool, each complete within `--preempt-after-seconds` plus
//! the slack a start takes — before, the newcomer's Pod sat behind every
//! Pod the others had queued at the node, for as long as they kept it full.
//! On the way: no work holds a slot waiting for a node past
//! `--capacity-wait-seconds`, those that gave theirs back are admitted
//! again, and nothing any of them mined is lost. Runs alone (see
//! .config/nextest.toml): it needs every slot of the node.
//!
//! (The crowd and the newcomer are two parties of one namespace — the
//! test's operator watches one — so the rule is exercised at its party
//! level; between namespaces it is the same rule one level up, covered by
//! the operator's unit tests, `admission::tests::node`.)

use std::time::{Duration, Instant};

use cluster_tests::mcp::Sdk;
use cluster_tests::tools::{ALICE, call, define, settle, setup_with, tool};
use cluster_tests::{assert_chain_verifies, create_workflow, eventually};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use mining_api::{MiningWorkflow, WorkflowPhase, reasons};
use serde_json::json;

/// The patient miner's difficulty: block 1 mined for real, block 2 "days".
const PATIENT: u32 = 3;
const CROWD: usize = 55;
const PREEMPT_AFTER: u64 = 5;
const CAPACITY_WAIT: u64 = 30;
/// What a start may take beyond the delay: the newcomer's Pod seen waiting
/// and its recheck (5 s), the victim's reconcile, its Job's deletion and
/// its Pod's end, the newcomer's Pod bound and run (as in operator_fair_share).
const START_SLACK: Duration = Duration::from_secs(45);
/// How late a give-back after the bound may be seen: the 5 s recheck of a
/// waiting Pod, a reconcile, and this test's own polling.
const BOUND_SLACK: i64 = 20;

/// The crowd's workflows as they stand now.
async fn crowd(api: &Api<MiningWorkflow>) -> Vec<MiningWorkflow> {
    let all = api.list(&ListParams::default()).await.unwrap().items;
    all.into_iter().filter(|w| w.metadata.name.as_deref().is_some_and(|n| n.starts_with("crowd-"))).collect()
}

fn waiting_for_node(workflow: &MiningWorkflow) -> Option<Timestamp> {
    workflow.status.as_ref()?.waiting_for_node_since.as_ref().map(|t| t.0)
}

/// What the test checks of the crowd whenever it looks: nothing holds a
/// slot waiting for a node past the bound, and no mined block was lost.
#[derive(Default)]
struct Watch {
    mined: std::collections::HashMap<String, usize>,
}

impl Watch {
    async fn look(&mut self, api: &Api<MiningWorkflow>) -> Vec<MiningWorkflow> {
        let crowd = crowd(api).await;
        let now = Timestamp::now();
        for workflow in &crowd {
            let name = workflow.metadata.name.clone().unwrap_or_default();
            if let Some(since) = waiting_for_node(workflow) {
                let waited = now.duration_since(since).as_secs();
                assert!(
                    waited <= CAPACITY_WAIT as i64 + BOUND_SLACK,
                    "{name} holds its slot waiting {waited} s for a node, past the bound {CAPACITY_WAIT} s"
                );
            }
            let mined = workflow.mined_blocks().len();
            let before = self.mined.insert(name.clone(), mined).unwrap_or(0);
            assert!(mined >= before, "{name} lost a mined block ({before} → {mined})");
        }
        crowd
    }
}

/// Waits until every slot of the node runs a long block of the crowd
/// (nothing there ends by itself any more); how many slots that is.
async fn node_full_of_long_blocks(ns: &cluster_tests::TestNamespace) -> usize {
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let node = nodes.list(&ListParams::default()).await.unwrap().items.remove(0);
    let capacity: usize = node.status.unwrap().capacity.unwrap()["pods"].0.parse().unwrap();
    let pods: Api<Pod> = ns.api();
    eventually("every slot of the node running a long block", Duration::from_secs(240), || async {
        let listed = pods.list(&ListParams::default()).await.ok()?.items;
        let running: Vec<&Pod> = listed
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let long = running.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.contains("-b2-")));
        (running.len() == capacity && long.count() == capacity).then_some(capacity)
    })
    .await
}

async fn count_events(ns: &cluster_tests::TestNamespace, reason: &str) -> usize {
    let events: Api<Event> = ns.api();
    let listed = events.list(&ListParams::default()).await.unwrap().items;
    listed.iter().filter(|e| e.reason.as_deref() == Some(reason)).count()
}

/// Polls `done` (watching the crowd meanwhile) until it says the newcomer
/// finished, within `bound`; how long it took.
async fn within<F, Fut>(
    what: &str,
    bound: Duration,
    watch: &mut Watch,
    api: &Api<MiningWorkflow>,
    mut done: F,
) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let asked = Instant::now();
    loop {
        watch.look(api).await;
        if done().await {
            return asked.elapsed();
        }
        assert!(asked.elapsed() < bound, "{what} did not complete within {bound:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
#[ignore = "needs the local cluster's local/patient image and its whole node; tests/run.sh runs it there"]
async fn a_newcomers_block_and_tool_run_get_a_full_node_within_the_bound() {
    let (preempt, capacity) = (PREEMPT_AFTER.to_string(), CAPACITY_WAIT.to_string());
    let args = [
        "--miner-image",
        "local/patient",
        "--preempt-after-seconds",
        &preempt,
        "--capacity-wait-seconds",
        &capacity,
    ];
    let (ns, _operator, frontend) = setup_with("fair-node", &args).await;
    let url = frontend.url();
    define(&ns, &url, tool("sum-preemptible", 0, json!({"preemptible": true}))).await;

    // The crowd: 55 long workflows, 50 admitted (the budget), the node full.
    let long = json!({"difficulty": PATIENT, "blocks": 2});
    let mut api = None;
    for i in 0..CROWD {
        api = Some(create_workflow(&ns, &format!("crowd-{i:02}"), long.clone()).await);
    }
    let api = api.unwrap();
    let mut watch = Watch::default();
    let full = node_full_of_long_blocks(&ns).await;
    watch.look(&api).await;
    eprintln!("the crowd runs {full} long blocks on the node, the node's every slot");

    // The newcomer's block: within the delay and the slack.
    let arguments = json!({"difficulty": 4, "blocks": 1, "wait_seconds": 0});
    let started = call(Sdk::Python, &url, ALICE, "start_mining", arguments).await;
    let id = started["workflow_id"].as_str().unwrap_or_else(|| panic!("{started:#}")).to_string();
    let bound = Duration::from_secs(PREEMPT_AFTER) + START_SLACK;
    let took = within("the newcomer's block", bound, &mut watch, &api, || {
        let (api, id) = (api.clone(), id.clone());
        async move { api.get(&id).await.is_ok_and(|w| w.phase() == WorkflowPhase::Succeeded) }
    })
    .await;
    eprintln!("the newcomer's block completed in {took:?} (bound {bound:?})");
    // Nothing on the node ends by itself: it got there by taking a running
    // slot back, after the delay (counted from its Pod's creation, in whole
    // seconds: up to a second less than measured here).
    assert!(took >= Duration::from_secs(PREEMPT_AFTER - 1), "it got a node before the delay: {took:?}");
    let yielded = count_events(&ns, reasons::YIELDED).await;
    assert!(yielded >= 1, "no running long block gave its slot back");
    assert_chain_verifies(&api.get(&id).await.unwrap(), 4);

    // The crowd fills the node again, and the newcomer's tool run (its
    // tool preemptible) gets a node the same way.
    node_full_of_long_blocks(&ns).await;
    watch.look(&api).await;
    let asked = Instant::now();
    let answer = call(Sdk::Python, &url, ALICE, "sum-preemptible", json!({"numbers": [1, 2]})).await;
    let done = match answer["status"].as_str() {
        Some("running") => settle(Sdk::Python, &url, ALICE, answer["workflow_id"].as_str().unwrap()).await,
        _ => answer,
    };
    assert_eq!(done["result"]["sum"], 3.0, "{done:#}");
    let took = asked.elapsed();
    eprintln!("the newcomer's tool run completed in {took:?} (bound {bound:?})");
    assert!(took < bound, "the tool run took {took:?}, more than {bound:?}");

    // Work that waited past the bound gave its slot back and was admitted
    // again; the crowd keeps the node busy and every block it mined.
    let crowd_now = watch.look(&api).await;
    let gave_back = count_events(&ns, reasons::NO_CAPACITY).await;
    let mined = crowd_now.iter().filter(|w| !w.mined_blocks().is_empty()).count();
    eprintln!(
        "the crowd gave slots back {gave_back} times for want of a node; {mined} of its workflows mined block 1"
    );
    assert!(gave_back >= 1, "no work gave its slot back for want of a node");
    assert!(mined >= full, "the crowd's workflows mined no block 1 beyond those on the node: {mined}");
    for workflow in crowd_now.iter().filter(|w| !w.mined_blocks().is_empty()) {
        assert_chain_verifies(workflow, PATIENT);
    }
    // Work waiting for a node past the bound gives its slot back (the
    // watch asserts none holds it longer), and is admitted again.
    let deadline = Instant::now() + Duration::from_secs(CAPACITY_WAIT + 90);
    let events: Api<Event> = ns.api();
    let (name, gave_at) = loop {
        watch.look(&api).await;
        let listed = events.list(&ListParams::default()).await.unwrap().items;
        let found = listed.into_iter().find_map(|e| {
            let bound = e.reason.as_deref() == Some(reasons::NO_CAPACITY)
                && e.note.as_deref().is_some_and(|n| n.contains("waited"));
            let at = e.event_time.as_ref()?.0;
            bound.then_some(())?;
            Some((e.regarding?.name?, at))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(Instant::now() < deadline, "no work gave its slot back after waiting the bound");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    eprintln!("{name} gave its slot back after waiting the bound");
    eventually("it admitted again", Duration::from_secs(CAPACITY_WAIT * 3), || {
        let (api, name) = (api.clone(), name.clone());
        async move {
            let workflow = api.get(&name).await.ok()?;
            let admitted = workflow.status.as_ref()?.admitted_at.as_ref()?.0;
            (admitted > gave_at).then_some(())
        }
    })
    .await;
    watch.look(&api).await;
}
