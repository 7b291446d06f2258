//! The copying between replicas (`mirror.rs`), against real outputs
//! servers on loopback and in-memory stores.

use super::*;
use crate::outputs::Limits;
fn run(phase: ToolRunPhase, outputs: Vec<ToolOutput>) -> Arc<ToolRun> {
    let mut run: ToolRun = serde_json::from_value(serde_json::json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
        "metadata": {"name": "r", "namespace": "ns", "uid": "u"},
        "spec": {"tool": "t", "arguments": "{}", "jobTemplate": {"spec": {"template": {}}}}
    }))
    .unwrap();
    let status = mining_api::ToolRunStatus { phase: Some(phase), outputs, ..Default::default() };
    run.status = Some(status);
    Arc::new(run)
}

fn in_memory() -> Arc<Outputs> {
    let limits = Limits {
        file_bytes: 1 << 20,
        run_bytes: 1 << 20,
        total_bytes: 1 << 30,
        uploads_at_once: 4,
        caller_bytes: 1 << 30,
        uploads_per_caller: 4,
    };
    Arc::new(Outputs::with_store(Arc::new(object_store::memory::InMemory::new()), limits))
}

#[test]
fn only_succeeded_runs_files_are_wanted() {
    let output = ToolOutput {
        name: "data.csv".into(),
        media_type: "text/csv".into(),
        size: 3,
        sha256: "ab".repeat(32),
    };
    let runs = [ToolRunPhase::Succeeded, ToolRunPhase::Failed, ToolRunPhase::Running]
        .map(|phase| run(phase, vec![output.clone()]));
    assert_eq!(wanted(&runs, 1 << 20), vec![("ns".into(), "r".into(), "u".into(), output.clone())]);
    // Status is a claim: a name no upload could have, or more bytes than a
    // file may have, is never asked for (nor written under the run's prefix).
    let bad_name = ToolOutput { name: ".meta/x".into(), ..output.clone() };
    assert!(wanted(&[run(ToolRunPhase::Succeeded, vec![bad_name])], 1 << 20).is_empty());
    assert!(wanted(&runs, 2).is_empty());
}

async fn serving(outputs: Arc<Outputs>, keys: &mining_api::ownership::OwnershipKeys) -> String {
    let (runs, _) = kube::runtime::reflector::store();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(super::super::server::serve_on(listener, outputs, keys.clone(), runs));
    url
}

fn only(urls: &[&str]) -> Sources {
    let listed = Some(urls.iter().map(|u| u.to_string()).collect());
    Sources { leader: urls[0].to_string(), peers: None, listed }
}

/// A replica copies what the run recorded from the leader's server, or
/// from another replica when the leader lacks it (a fresh leader), and
/// keeps nothing a server sends that differs from the record.
#[tokio::test]
async fn a_replica_copies_the_recorded_files_from_the_leader_or_another_replica() {
    // The process's TLS provider, as main installs it (reqwest needs one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let keys = mining_api::ownership::OwnershipKeys::new(vec![7; 32], None).unwrap();
    let (holder, empty_leader, replica) = (in_memory(), in_memory(), in_memory());
    let body = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"n,v\n1,1\n"))]);
    let stored = holder.upload(["ns", "r", "u"], "", "data.csv", Some("text/csv"), body).await.unwrap();
    let holder_url = serving(holder.clone(), &keys).await;
    let empty_url = serving(empty_leader, &keys).await;
    let (runs, mut writer) = kube::runtime::reflector::store();
    let client = reqwest::Client::new();
    let mut copier = Copier::default();
    let apply = |writer: &mut kube::runtime::reflector::store::Writer<ToolRun>, run: Arc<ToolRun>| {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply((*run).clone()))
    };

    // A record the served bytes do not match: nothing is kept, and it counts as missing.
    let forged = ToolOutput { sha256: "00".repeat(32), ..stored.clone() };
    apply(&mut writer, run(ToolRunPhase::Succeeded, vec![forged]));
    assert_eq!(copier.copy_missing(&replica, &runs, &keys, &mut only(&[&holder_url]), &client).await, 1);
    assert!(replica.recorded("ns", "u").await.unwrap().is_empty());

    // The run's own record: the leader lacks it, another replica has it.
    apply(&mut writer, run(ToolRunPhase::Succeeded, vec![stored.clone()]));
    let mut sources = only(&[&empty_url, &holder_url]);
    assert_eq!(copier.copy_missing(&replica, &runs, &keys, &mut sources, &client).await, 0);
    assert_eq!(replica.recorded("ns", "u").await.unwrap(), vec![stored.clone()]);
    let (_, bytes) = replica.read("ns", "u", "data.csv").await.unwrap();
    let bytes: Vec<bytes::Bytes> = futures::TryStreamExt::try_collect(bytes).await.unwrap();
    assert_eq!(bytes.concat(), b"n,v\n1,1\n");

    // Held (looked at again once a minute); the forged record went with it.
    assert!(copier.held.len() == 1 && copier.retry.is_empty());
    // A file no source holds (lost with an earlier leader), nor any
    // server answering: nothing to wait for, nothing kept.
    let lost = ToolOutput { name: "lost.csv".into(), ..stored.clone() };
    let mut other = (*run(ToolRunPhase::Succeeded, vec![lost])).clone();
    other.metadata.name = Some("other".into());
    other.metadata.uid = Some("u2".into());
    apply(&mut writer, Arc::new(other));
    let mut sources = only(&[&empty_url, "http://127.0.0.1:1"]);
    assert_eq!(copier.copy_missing(&replica, &runs, &keys, &mut sources, &client).await, 0);
    assert!(replica.recorded("ns", "u2").await.unwrap().is_empty());
    assert_eq!(replica.recorded("ns", "u").await.unwrap(), vec![stored], "what it held stays");
}

/// Whatever ends the copying, the replica becomes ready once, and only once.
#[test]
fn the_first_copy_is_said_once_whatever_ends_it() {
    let said = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = said.clone();
    let first = FirstCopy::new(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    });
    drop(DoneOnDrop(first.clone()));
    assert!(!first.done(), "said already");
    assert_eq!(said.load(std::sync::atomic::Ordering::SeqCst), 1);
}
