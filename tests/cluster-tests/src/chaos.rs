//! A bad afternoon, as a test: workflows started through the chart's frontend
//! Service by three MCP callers (raw JSON-RPC over HTTP, an idempotency key on
//! every start, retried on every transient failure, some started twice on
//! purpose), while operator Pods and frontend Pods are force-deleted and the
//! node agent is SIGKILLed and restarted, in turn. Then every workflow must
//! complete within a bound after the last kill with the reference chain,
//! exactly one workflow per key and one Job per block, and each caller must
//! list exactly its own. The suite runs a short plan (tests/chaos.rs); the
//! `chaos-bench` binary runs the long one and prints the numbers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::{MiningWorkflow, labels};
use serde_json::{Value, json};

use crate::mcp::http_request;
use crate::release::Release;
use crate::{is_local_cluster, reference_chain, repo_root};

/// What to run: how many workflows, how long the chaos lasts, how many
/// times each component is killed, and how soon after the last kill all
/// must be done.
#[derive(Clone, Debug)]
pub struct Plan {
    pub workflows: usize,
    pub blocks: u32,
    pub difficulty: u32,
    pub chaos: Duration,
    /// Kills of each kind, spread evenly over `chaos`.
    pub kills_each: usize,
    pub drain_bound: Duration,
    /// More `helm install` arguments (e.g. `--set priorityClass.create=false`).
    pub chart_values: Vec<String>,
}

/// What happened, for the bench's table.
#[derive(Debug, Default)]
pub struct Report {
    pub workflows: usize,
    pub blocks_verified: usize,
    /// Kills of operator Pods, frontend Pods and the node agent.
    pub kills: [usize; 3],
    /// Starts and polls that failed and were retried (connection refused or
    /// reset, no endpoint, 5xx, a tool error), and starts repeated on purpose.
    pub start_retries: usize,
    pub poll_retries: usize,
    /// The longest a call kept failing before it was answered.
    pub longest_outage: Duration,
    pub repeated_starts: usize,
    /// From the last kill until every workflow was seen complete.
    pub drain: Duration,
    pub elapsed: Duration,
}

const CALLERS: [&str; 3] = ["alice", "bob", "carol"];

/// Each caller's bearer token (the chart's tokens mode): unguessable per run.
fn tokens() -> Vec<(String, String)> {
    CALLERS
        .iter()
        .map(|caller| {
            let mut secret = [0u8; 16];
            getrandom::fill(&mut secret).expect("random bytes");
            let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
            (caller.to_string(), format!("{caller}-{hex}"))
        })
        .collect()
}

/// Failed calls that were tried again, and the longest run of them.
#[derive(Default)]
struct Retries {
    count: usize,
    longest: Duration,
}

/// The frontend Service as a caller reaches it.
#[derive(Clone)]
struct Service {
    addr: SocketAddr,
    host: String,
}

impl Service {
    /// One `tools/call`: the tool's structured result, or why it failed
    /// (which the caller treats as transient and retries).
    async fn call(&self, token: &str, tool: &str, arguments: Value) -> Result<Value, String> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}})
        .to_string();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
             Authorization: Bearer {token}\r\n",
            self.host
        );
        let (code, _, body) = http_request(self.addr, &head, &body).await;
        if code != 200 {
            return Err(format!("HTTP {code}"));
        }
        let message = (body.lines().map(|l| l.strip_prefix("data: ").unwrap_or(l)))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
            .ok_or_else(|| format!("no JSON-RPC answer in {body:?}"))?;
        if message["result"]["isError"] == true || message.get("error").is_some() {
            return Err(format!("{message}"));
        }
        Ok(message["result"]["structuredContent"].clone())
    }

    /// Calls until an answer comes, counting the retries; panics after `deadline`.
    async fn call_until_answered(
        &self,
        token: &str,
        tool: &str,
        arguments: Value,
        deadline: Instant,
        retries: &mut Retries,
    ) -> Value {
        let mut first_failure = None;
        loop {
            match self.call(token, tool, arguments.clone()).await {
                Ok(answer) => {
                    let outage = first_failure.map_or(Duration::ZERO, |at: Instant| at.elapsed());
                    retries.longest = retries.longest.max(outage);
                    return answer;
                }
                Err(why) if Instant::now() < deadline => {
                    retries.count += 1;
                    first_failure.get_or_insert_with(Instant::now);
                    say(&format!("{tool} failed, retrying: {why}"));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(why) => panic!("{tool} never answered before the deadline: {why}"),
            }
        }
    }
}

fn say(line: &str) {
    if std::env::var_os("CHAOS_VERBOSE").is_some() {
        eprintln!("[chaos] {line}");
    }
}

/// One caller's part: start each of its workflows (some twice), paced over
/// the chaos, then wait for each to finish. Returns key → (id, outcome).
async fn caller(
    service: Service,
    (name, token): (String, String),
    plan: Plan,
    count: usize,
    report: Arc<Mutex<Report>>,
) -> (String, BTreeMap<String, (String, Value)>) {
    let started_at = Instant::now();
    let pace = plan.chaos.checked_div(count as u32).unwrap_or_default();
    let start_deadline = started_at + plan.chaos + plan.drain_bound;
    let (mut start_retries, mut repeated) = (Retries::default(), 0);
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    let arguments = |key: &str| json!({"difficulty": plan.difficulty, "blocks": plan.blocks, "wait_seconds": 0, "idempotency_key": key});
    for i in 0..count {
        let key = format!("{name}-{i}");
        let started = (service.call_until_answered(
            &token,
            "start_mining",
            arguments(&key),
            start_deadline,
            &mut start_retries,
        ))
        .await;
        let id = started["workflow_id"].as_str().expect("a workflow id").to_string();
        ids.insert(key, id);
        // Every third start is repeated on purpose: the same key names the same work.
        if i % 3 == 2 {
            let again = format!("{name}-{}", i - 2);
            let answer = (service.call_until_answered(
                &token,
                "start_mining",
                arguments(&again),
                start_deadline,
                &mut start_retries,
            ))
            .await;
            assert_eq!(
                answer["workflow_id"].as_str(),
                Some(ids[&again].as_str()),
                "{again} named another workflow"
            );
            repeated += 1;
        }
        tokio::time::sleep_until((started_at + pace * (i as u32 + 1)).into()).await;
    }
    let poll_deadline = Instant::now() + plan.chaos + plan.drain_bound;
    let mut poll_retries = Retries::default();
    let mut outcomes = BTreeMap::new();
    for (key, id) in ids {
        let mut outcome = Value::Null;
        while outcome["status"] != "completed" {
            assert!(Instant::now() < poll_deadline, "{id} ({key}) did not complete: {outcome}");
            outcome = (service.call_until_answered(
                &token,
                "get_mining_result",
                json!({"workflow_id": id, "wait_seconds": 10}),
                poll_deadline,
                &mut poll_retries,
            ))
            .await;
            assert!(
                ["running", "completed"].contains(&outcome["status"].as_str().unwrap_or("")),
                "{key}: {outcome}"
            );
        }
        outcomes.insert(key, (id, outcome));
    }
    let mut report = report.lock().unwrap();
    report.start_retries += start_retries.count;
    report.poll_retries += poll_retries.count;
    report.longest_outage = report.longest_outage.max(start_retries.longest).max(poll_retries.longest);
    report.repeated_starts += repeated;
    (name, outcomes)
}

/// Kills, in turn, the leading operator Pod, a frontend Pod and (on the local
/// cluster) the node agent, `kills_each` times each, evenly over `chaos`.
/// Returns when the last kill was done.
async fn kill_loop(release: &Release, plan: &Plan, report: &Mutex<Report>) -> Instant {
    let pods: Api<Pod> = release.ns.api();
    let leases: Api<Lease> = release.ns.api();
    let began = Instant::now();
    let kills = 3 * plan.kills_each;
    let mut last_kill = began;
    for turn in 0..kills {
        // At fixed moments: a slow restart does not push the later kills out.
        let at = began + plan.chaos.mul_f64((turn + 1) as f64 / (kills + 1) as f64);
        tokio::time::sleep_until(at.into()).await;
        let kind = turn % 3;
        if kind == 2 && !is_local_cluster() {
            continue;
        }
        if kind == 2 {
            let restarted = tokio::process::Command::new(repo_root().join("tests/cluster/cluster.sh"))
                .arg("restart-agent")
                .output()
                .await
                .expect("run cluster.sh");
            assert!(restarted.status.success(), "{}", String::from_utf8_lossy(&restarted.stderr));
        } else {
            let component = if kind == 0 { "operator" } else { "frontend" };
            let selector = format!(
                "app.kubernetes.io/instance={},app.kubernetes.io/component={component}",
                release.name
            );
            let listed = pods.list(&ListParams::default().labels(&selector)).await.unwrap().items;
            let mut alive: Vec<String> = (listed.into_iter())
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name)
                .collect();
            alive.sort();
            // The leader when there is one (its successor must take over), else each in turn.
            let leader = leases.get_opt(&format!("{}-operator", release.fullname())).await.ok().flatten();
            let holder = leader.and_then(|l| l.spec?.holder_identity).filter(|h| alive.contains(h));
            let victim = match component {
                "operator" => holder.or_else(|| alive.first().cloned()),
                _ => alive.get((turn / 3) % alive.len().max(1)).cloned(),
            };
            let Some(victim) = victim else { continue };
            let _ = pods
                .delete(&victim, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
                .await;
        }
        say(&format!("killed kind {kind}"));
        report.lock().unwrap().kills[kind] += 1;
        last_kill = Instant::now();
    }
    last_kill
}

/// The uids of the Jobs seen for each (workflow, block label).
type JobsSeen = Arc<Mutex<HashMap<(String, String), BTreeSet<String>>>>;

/// Every Job the namespace had, by (workflow, block label): their uids.
fn count_jobs(release: &Release) -> (JobsSeen, tokio::task::JoinHandle<()>) {
    let seen: JobsSeen = Arc::default();
    let jobs =
        watcher(release.work.api::<Job>(), watcher::Config::default()).default_backoff().applied_objects();
    let record = seen.clone();
    let task = tokio::spawn(async move {
        futures::pin_mut!(jobs);
        while let Ok(Some(job)) = jobs.try_next().await {
            let labels = job.metadata.labels.clone().unwrap_or_default();
            let (Some(workflow), Some(block)) = (labels.get(labels::WORKFLOW), labels.get(labels::BLOCK))
            else {
                continue;
            };
            let uid = job.metadata.uid.clone().unwrap_or_default();
            record.lock().unwrap().entry((workflow.clone(), block.clone())).or_default().insert(uid);
        }
    });
    (seen, task)
}

/// Installs the chart, runs `plan` through it, checks every guarantee, and
/// uninstalls it.
pub async fn run(prefix: &str, plan: Plan) -> Report {
    let began = Instant::now();
    let tokens = tokens();
    let lines: Vec<String> = tokens.iter().map(|(caller, token)| format!("{token} {caller}")).collect();
    let tokens_value = format!("frontend.auth.tokens={}", lines.join("\n"));
    let mut values = vec![
        "--set".to_string(),
        "frontend.auth.mode=tokens".into(),
        "--set".into(),
        tokens_value,
        // All three callers come from this one host, faster than a person.
        "--set".into(),
        "frontend.maxConnectionsPerSource=1000".into(),
        "--set".into(),
        "frontend.maxStartsPerMinute=1000".into(),
        "--set".into(),
        "frontend.maxRunningPerCaller=1000".into(),
    ];
    values.extend(plan.chart_values.iter().cloned());
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let release = Release::install(prefix, &values).await;
    let (url, host) = release.frontend_url().await;
    let authority = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let addr: SocketAddr = format!("{authority}:80").parse().expect("the Service's address");
    let service = Service { addr, host };
    let (jobs, watch) = count_jobs(&release);
    let report = Arc::new(Mutex::new(Report { workflows: plan.workflows, ..Default::default() }));

    let per_caller = plan.workflows / CALLERS.len();
    let callers: Vec<_> = (tokens.iter().cloned())
        .map(|token| tokio::spawn(caller(service.clone(), token, plan.clone(), per_caller, report.clone())))
        .collect();
    let last_kill = kill_loop(&release, &plan, &report).await;
    if is_local_cluster() {
        // Every restart left a running agent (and the rest of the cluster) behind.
        let status = std::process::Command::new(repo_root().join("tests/cluster/cluster.sh"))
            .arg("status")
            .output()
            .expect("run cluster.sh");
        let said = String::from_utf8_lossy(&status.stdout);
        assert!(status.status.success(), "after the chaos the test cluster is {said}");
    }
    let mut outcomes = Vec::new();
    for task in callers {
        outcomes.push(task.await.expect("a caller panicked"));
    }
    let drain = last_kill.elapsed();
    assert!(
        drain <= plan.drain_bound,
        "the work drained {drain:?} after the last kill, over {:?}",
        plan.drain_bound
    );

    // Every chain is the reference's: hash, zero bits, minimal nonce, linkage.
    let reference = reference_chain(plan.blocks, plan.difficulty);
    let mut all_ids = BTreeSet::new();
    for (_, outcomes) in &outcomes {
        for (key, (id, outcome)) in outcomes {
            crate::assert_matches_reference(outcome, &reference, plan.difficulty);
            assert!(all_ids.insert(id.clone()), "{key}: {id} is another key's workflow too");
        }
    }
    // Exactly one workflow per key, each Succeeded, with one Job per block.
    let workflows: Api<MiningWorkflow> = release.work.api();
    let stored = workflows.list(&ListParams::default()).await.unwrap().items;
    let stored_ids: BTreeSet<String> = stored.iter().filter_map(|w| w.metadata.name.clone()).collect();
    assert_eq!(stored_ids, all_ids, "one workflow per idempotency key, and no other");
    for workflow in &stored {
        crate::assert_chain_verifies(workflow, plan.difficulty);
    }
    watch.abort();
    let jobs = jobs.lock().unwrap().clone();
    // A block's Job deleted before any Pod of it got a node, the workflow
    // giving its slot back at the full node (`NoCapacity`, docs/OPERATOR.md
    // "Fair share at the node"), is made again: each such give-back
    // explains one more Job; nothing else may.
    let events: Api<k8s_openapi::api::events::v1::Event> = release.work.api();
    let listed = events.list(&ListParams::default()).await.unwrap().items;
    let mut gave_back: HashMap<String, usize> = HashMap::new();
    for event in listed.iter().filter(|e| e.reason.as_deref() == Some(mining_api::reasons::NO_CAPACITY)) {
        let name = event.regarding.as_ref().and_then(|r| r.name.clone()).unwrap_or_default();
        *gave_back.entry(name).or_default() += 1;
    }
    for id in &all_ids {
        let made: BTreeMap<&str, usize> = (jobs.iter())
            .filter(|((workflow, _), _)| workflow == id)
            .map(|((_, block), uids)| (block.as_str(), uids.len()))
            .collect();
        assert_eq!(made.len(), plan.blocks as usize, "{id}: Jobs for blocks {made:?}");
        let extra: usize = made.values().map(|&n| n - 1).sum();
        let explained = gave_back.get(id).copied().unwrap_or(0);
        assert!(
            extra <= explained,
            "{id}: more than one Job for a block: {made:?}, {explained} given back for want of a node"
        );
    }
    // Each caller lists exactly its own.
    for ((name, token), (owner, outcomes)) in tokens.iter().zip(&outcomes) {
        assert_eq!(name, owner);
        let mut retries = Retries::default();
        let deadline = Instant::now() + Duration::from_secs(60);
        let listed = (service.call_until_answered(
            token,
            "list_mining_workflows",
            json!({"limit": 100}),
            deadline,
            &mut retries,
        ))
        .await;
        let ids: BTreeSet<&str> = (listed["workflows"].as_array().unwrap().iter())
            .filter_map(|w| w["workflow_id"].as_str())
            .collect();
        let own: BTreeSet<&str> = outcomes.values().map(|(id, _)| id.as_str()).collect();
        assert_eq!(listed["total"], own.len(), "{name}'s list");
        if own.len() <= 100 {
            assert_eq!(ids, own, "{name} lists exactly its own");
        } else {
            assert!(ids.is_subset(&own), "{name} lists another caller's work");
        }
    }
    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
    let mut report = std::mem::take(&mut *report.lock().unwrap());
    report.blocks_verified = all_ids.len() * plan.blocks as usize;
    report.drain = drain;
    report.elapsed = began.elapsed();
    report
}
