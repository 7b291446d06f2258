//! Benchmark: tool runs against the floor of their own Jobs.
//!
//! `cargo run --release -p cluster-tests --bin tool-floor-bench -- [RUNS] [ROUNDS]`
//! against the local cluster in `$KUBECONFIG` (defaults 200 runs, 2 rounds).
//! Each round runs, in fresh namespaces one after the other: (1) the floor —
//! one of the operator's own tool-run Jobs is captured as the template and a
//! driver creates RUNS copies at once, then waits until every one is seen
//! `Complete` (no result read, no status, no queue); (2) the operator —
//! RUNS ToolRuns of the same tool created at once, until every one is seen
//! `Succeeded`; (3) the writes floor — no operator, a driver that makes, for
//! each run, exactly the API calls the operator makes for one (the run, its
//! arguments Secret, the Job, the status written when it starts and when
//! its Job completes, the Secret read, the Event, the Job's deletion) with
//! no decision between them. It prints each run, operator ÷ floor and
//! operator ÷ writes floor of the median walls. `BENCH_OPERATOR=PATH`
//! measures another build.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::{ToolRun, ToolRunPhase, labels};
use serde_json::json;

use cluster_tests::mcp::ownership_key_file;
use cluster_tests::tools::tool;
use cluster_tests::{OperatorProcess, TestNamespace, install_crd, operator_binary};
use mining_api::ownership::OwnershipKeys;

/// Runs the operator admits at once in the bench (all of them).
const CAP: &str = "1000";

/// A run as the frontend makes it: the caller's label and the frontend's
/// proof (the operator runs no other), signed with the namespace's key.
fn run_object(ns: &TestNamespace, name: &str) -> ToolRun {
    let defined = tool("bench-sum", 0, json!({}));
    let mut run: ToolRun = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
        "metadata": {"name": name, "namespace": ns.name, "labels": {labels::CALLER: "bench"}},
        "spec": {"tool": "bench-sum", "arguments": r#"{"numbers":[1,2]}"#,
                 "jobTemplate": defined.spec.job_template},
    }))
    .unwrap();
    let keys = OwnershipKeys::from_files(&ownership_key_file(&ns.name), None).unwrap();
    let proof = keys.proof(&run);
    run.metadata.annotations = Some([(mining_api::annotations::OWNER_PROOF.to_string(), proof)].into());
    run
}

fn operator_args(ns: &TestNamespace) -> Vec<String> {
    let key = ownership_key_file(&ns.name).display().to_string();
    // Every run is one caller's ("bench"): its party's cap (default 5) is
    // lifted too (0: none), or the bench would measure a queue of one caller.
    [
        "--max-concurrent-tool-runs",
        CAP,
        "--max-concurrent-workflows",
        CAP,
        "--max-concurrent-work",
        CAP,
        "--max-tool-runs-per-caller",
        "0",
    ]
    .map(String::from)
    .into_iter()
    .chain(["--ownership-key-file".to_string(), key])
    .collect()
}

/// The operator's Job of one run, captured and stripped of what the API
/// server and the Job controller own.
async fn operator_job(ns: &TestNamespace, operator: &Path) -> Job {
    let args = operator_args(ns);
    let process = OperatorProcess::start_binary(
        operator,
        &ns.name,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    // Watched from before the run exists: the operator deletes a finished
    // run's Job once it has read its result.
    let jobs: Api<Job> = ns.api();
    let mut seen = watcher(jobs, watcher::Config::default()).default_backoff().applied_objects().boxed();
    ns.api::<ToolRun>().create(&PostParams::default(), &run_object(ns, "template")).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(60), seen.try_next()).await;
    let mut job = first.ok().and_then(Result::ok).flatten().expect("the operator's Job to copy within 60 s");
    drop(process);
    job.status = None;
    if let Some(spec) = job.spec.as_mut() {
        spec.selector = None;
        spec.manual_selector = None;
        if let Some(pod_labels) = spec.template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            pod_labels.retain(|key, _| !key.contains("controller-uid") && !key.contains("job-name"));
        }
    }
    job
}

fn complete(job: &Job) -> bool {
    (job.status.as_ref().and_then(|s| s.conditions.as_ref()))
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
}

/// The floor: `runs` copies of the operator's Job, created at once.
async fn floor(operator: &Path, runs: usize) -> (Duration, usize) {
    let ns = TestNamespace::new("tool-floor").await;
    install_crd(&ns.client).await;
    let template = operator_job(&ns, operator).await;
    let jobs: Api<Job> = ns.api();
    let selector = format!("{}=floor", labels::MANAGED_BY);
    let mut seen = watcher(jobs.clone(), watcher::Config::default().labels(&selector))
        .default_backoff()
        .applied_objects()
        .boxed();
    let started = Instant::now();
    for i in 0..runs {
        let mut job = template.clone();
        let mut meta_labels = template.metadata.labels.clone().unwrap_or_default();
        meta_labels.insert(labels::MANAGED_BY.into(), "floor".into());
        job.metadata = ObjectMeta {
            name: Some(format!("floor-{i}")),
            labels: Some(meta_labels),
            annotations: template.metadata.annotations.clone(),
            ..ObjectMeta::default()
        };
        let jobs = jobs.clone();
        tokio::spawn(async move { jobs.create(&PostParams::default(), &job).await.expect("a floor Job") });
    }
    let (mut done, mut first_seen) = (HashSet::new(), HashSet::new());
    let mut made_at = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(900);
    while done.len() < runs && Instant::now() < deadline {
        if let Ok(Ok(Some(job))) = tokio::time::timeout(Duration::from_secs(5), seen.try_next()).await {
            let name = job.metadata.name.clone().unwrap_or_default();
            if first_seen.insert(name.clone()) {
                made_at.push(started.elapsed().as_secs_f64());
            }
            if complete(&job) {
                done.insert(name);
            }
        }
    }
    made_at.sort_by(f64::total_cmp);
    eprintln!(
        "  floor breakdown: Jobs made: median {:.1} s, last {:.1} s; complete: last {:.1} s",
        made_at.get(made_at.len() / 2).copied().unwrap_or(0.0),
        made_at.last().copied().unwrap_or(0.0),
        started.elapsed().as_secs_f64()
    );
    (started.elapsed(), done.len())
}

/// The writes floor: for each of `runs` runs at once, the operator's API
/// calls for one run in its order, made by a driver that decides nothing.
async fn writes_floor(operator: &Path, runs: usize) -> (Duration, usize) {
    let ns = TestNamespace::new("tool-writes").await;
    install_crd(&ns.client).await;
    let template = operator_job(&ns, operator).await;
    let jobs: Api<Job> = ns.api();
    // Each Job's completion, told to the driver of its run.
    let waiters: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<String, tokio::sync::oneshot::Sender<()>>>,
    > = Default::default();
    let selector = format!("{}=writes", labels::MANAGED_BY);
    let mut seen = watcher(jobs.clone(), watcher::Config::default().labels(&selector))
        .default_backoff()
        .applied_objects()
        .boxed();
    let watch = {
        let waiters = waiters.clone();
        tokio::spawn(async move {
            while let Ok(Some(job)) = seen.try_next().await {
                if complete(&job)
                    && let Some(done) = waiters.lock().unwrap().remove(&job.metadata.name.unwrap_or_default())
                {
                    let _ = done.send(());
                }
            }
        })
    };
    let started = Instant::now();
    let mut drivers = Vec::new();
    for i in 0..runs {
        let name = format!("run-{i}");
        let (done, completed) = tokio::sync::oneshot::channel();
        waiters.lock().unwrap().insert(name.clone(), done);
        let (runs_api, secrets, jobs, events): (Api<ToolRun>, Api<Secret>, Api<Job>, Api<Event>) =
            (ns.api(), ns.api(), ns.api(), ns.api());
        let run = run_object(&ns, &name);
        let mut job = template.clone();
        let mut meta_labels = template.metadata.labels.clone().unwrap_or_default();
        meta_labels.insert(labels::MANAGED_BY.into(), "writes".into());
        job.metadata = ObjectMeta {
            name: Some(name.clone()),
            labels: Some(meta_labels),
            annotations: template.metadata.annotations.clone(),
            ..ObjectMeta::default()
        };
        let namespace = ns.name.clone();
        drivers.push(tokio::spawn(async move {
            let params = PostParams::default();
            let made = runs_api.create(&params, &run).await.expect("a run");
            let secret_name = mining_api::tool::arguments_secret_name(&name);
            let secret = Secret {
                metadata: ObjectMeta { name: Some(secret_name.clone()), ..ObjectMeta::default() },
                string_data: Some([("arguments.json".to_string(), "{}".to_string())].into()),
                ..Secret::default()
            };
            secrets.create(&params, &secret).await.expect("a Secret");
            jobs.create(&params, &job).await.expect("a Job");
            let status = |phase: &str| {
                Patch::Merge(json!({"status": {"phase": phase, "message": "running", "progress": "0/1"}}))
            };
            runs_api
                .patch_status(&name, &PatchParams::default(), &status("Running"))
                .await
                .expect("a status");
            completed.await.expect("the Job completes");
            secrets.get(&secret_name).await.expect("the Secret");
            runs_api
                .patch_status(&name, &PatchParams::default(), &status("Succeeded"))
                .await
                .expect("a status");
            let event: Event = serde_json::from_value(json!({
                "metadata": {"generateName": "run-", "namespace": namespace},
                "eventTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                "reportingController": "bench", "reportingInstance": "bench", "action": "Reconcile",
                "reason": "RunSucceeded", "type": "Normal", "note": "the tool finished",
                "regarding": {"apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
                    "name": name, "namespace": namespace, "uid": made.metadata.uid},
            }))
            .unwrap();
            events.create(&params, &event).await.expect("an Event");
            jobs.delete(&name, &DeleteParams::background()).await.expect("the Job deleted");
        }));
    }
    let mut done = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(900);
    for driver in drivers {
        if tokio::time::timeout_at(deadline, driver).await.is_ok_and(|r| r.is_ok()) {
            done += 1;
        }
    }
    watch.abort();
    (started.elapsed(), done)
}

/// The operator: `runs` ToolRuns created at once, until all succeeded; also
/// its API calls per run, by verb and resource, from its /metrics.
async fn operator(binary: &Path, runs: usize) -> (Duration, usize, f64, Vec<String>) {
    let ns = TestNamespace::new("tool-operator").await;
    install_crd(&ns.client).await;
    let args = operator_args(&ns);
    let process =
        OperatorProcess::start_binary(binary, &ns.name, &args.iter().map(String::as_str).collect::<Vec<_>>());
    // Its caches synced (as in the floor: nothing is created before it can act).
    cluster_tests::eventually("the operator to be ready", Duration::from_secs(60), || async {
        (process.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    let api: Api<ToolRun> = ns.api();
    let mut seen =
        watcher(api.clone(), watcher::Config::default()).default_backoff().applied_objects().boxed();
    let made: Vec<ToolRun> = (0..runs).map(|i| run_object(&ns, &format!("run-{i}"))).collect();
    // Where the time goes: when each run's Job was first seen and seen Complete.
    let jobs_seen = std::sync::Arc::new(std::sync::Mutex::new((Vec::new(), Vec::new())));
    let job_watch = {
        let jobs_seen = jobs_seen.clone();
        let mut jobs = watcher(ns.api::<Job>(), watcher::Config::default().labels(labels::TOOL_RUN))
            .default_backoff()
            .applied_objects()
            .boxed();
        tokio::spawn(async move {
            let (mut made, mut completed) = (HashSet::new(), HashSet::new());
            while let Ok(Some(job)) = jobs.try_next().await {
                let name = job.metadata.name.clone().unwrap_or_default();
                let mut seen = jobs_seen.lock().unwrap();
                if made.insert(name.clone()) {
                    seen.0.push(Instant::now());
                }
                if complete(&job) && completed.insert(name) {
                    seen.1.push(Instant::now());
                }
            }
        })
    };
    let started = Instant::now();
    for run in made {
        let api = api.clone();
        tokio::spawn(async move { api.create(&PostParams::default(), &run).await.expect("a run") });
    }
    let mut done = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(900);
    while done.len() < runs && Instant::now() < deadline {
        if let Ok(Ok(Some(run))) = tokio::time::timeout(Duration::from_secs(5), seen.try_next()).await
            && run.status.as_ref().and_then(|s| s.phase) == Some(ToolRunPhase::Succeeded)
        {
            done.insert(run.metadata.name.unwrap_or_default());
        }
    }
    let wall = started.elapsed();
    job_watch.abort();
    let (made, completed) = jobs_seen.lock().unwrap().clone();
    let last = |at: &[Instant]| at.iter().max().map_or(0.0, |t| t.duration_since(started).as_secs_f64());
    let middle = |at: &[Instant]| {
        let mut at: Vec<f64> = at.iter().map(|t| t.duration_since(started).as_secs_f64()).collect();
        at.sort_by(f64::total_cmp);
        at.get(at.len() / 2).copied().unwrap_or(0.0)
    };
    eprintln!(
        "  operator breakdown: Jobs made: median {:.1} s, last {:.1} s; Jobs complete: median {:.1} s, last {:.1} s; \
         runs succeeded: last {:.1} s",
        middle(&made),
        last(&made),
        middle(&completed),
        last(&completed),
        wall.as_secs_f64()
    );
    let (_, metrics) = process.get("/metrics").await;
    let calls: Vec<(String, f64)> = metrics
        .lines()
        .filter(|l| l.starts_with("mining_operator_api_calls_total{"))
        .filter_map(|l| l.rsplit_once(' ').map(|(k, v)| (k.to_string(), v.parse::<f64>().unwrap_or(0.0))))
        .collect();
    let total = calls.iter().map(|(_, v)| v).sum::<f64>() / runs as f64;
    let by_kind = calls.iter().map(|(k, v)| format!("{k} {:.2}", v / runs as f64)).collect();
    (wall, done.len(), total, by_kind)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) { (values[middle - 1] + values[middle]) / 2.0 } else { values[middle] }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().map_or(200, |a| a.parse().expect("RUNS"));
    let rounds: usize = args.next().map_or(2, |a| a.parse().expect("ROUNDS"));
    let binary = std::env::var_os("BENCH_OPERATOR").map_or_else(operator_binary, PathBuf::from);
    println!("runs={runs} rounds={rounds}");
    println!("| round | driver | done | wall s |");
    println!("|---|---|---:|---:|");
    let (mut floors, mut operators, mut writes) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        let (wall, done) = floor(&binary, runs).await;
        println!("| {round} | floor | {done}/{runs} | {:.1} |", wall.as_secs_f64());
        floors.push(wall.as_secs_f64());
        let (wall, done) = writes_floor(&binary, runs).await;
        println!("| {round} | writes floor | {done}/{runs} | {:.1} |", wall.as_secs_f64());
        writes.push(wall.as_secs_f64());
        let (wall, done, calls, by_kind) = operator(&binary, runs).await;
        println!(
            "| {round} | operator | {done}/{runs} | {:.1} | {calls:.1} API calls / run |",
            wall.as_secs_f64()
        );
        if std::env::var_os("BENCH_VERBOSE").is_some() {
            by_kind.iter().for_each(|line| eprintln!("{line}"));
        }
        operators.push(wall.as_secs_f64());
    }
    let (floor, operator, writes) = (median(floors), median(operators), median(writes));
    println!(
        "median wall: floor {floor:.1} s, writes floor {writes:.1} s, operator {operator:.1} s; \
         operator ÷ floor = {:.2}, operator ÷ writes floor = {:.2}",
        operator / floor,
        operator / writes
    );
}
