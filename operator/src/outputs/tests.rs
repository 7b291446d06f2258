//! The store's bounds and checks, against an in-memory store (the same
//! `object_store` code paths as the embedded and S3 stores; the cluster
//! tests run both for real).

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};
use mining_api::tool_outputs::{MAX_OUTPUTS, object_key};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use sha2::Digest as _;

use super::{Limits, Outputs};

const RUN: [&str; 3] = ["ns", "run", "uid-1"];

fn outputs(file_bytes: u64, run_bytes: u64, total_bytes: u64) -> (Outputs, Arc<InMemory>) {
    let memory = Arc::new(InMemory::new());
    let store: Arc<dyn ObjectStore> = memory.clone();
    (
        Outputs::with_store(
            store,
            Limits {
                file_bytes,
                run_bytes,
                total_bytes,
                uploads_at_once: 4,
                caller_bytes: total_bytes,
                uploads_per_caller: 4,
            },
        ),
        memory,
    )
}

fn body(chunks: &[&[u8]]) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Unpin {
    futures::stream::iter(chunks.iter().map(|c| Ok(Bytes::copy_from_slice(c))).collect::<Vec<_>>())
}

async fn read_all(outputs: &Outputs, name: &str) -> Result<Vec<u8>, String> {
    let (_, stream) = outputs.read("ns", "uid-1", name).await.map_err(|r| r.message)?;
    let chunks: Vec<Bytes> = stream.try_collect().await.map_err(|e| e.to_string())?;
    Ok(chunks.concat())
}

#[tokio::test]
async fn a_file_is_stored_recorded_and_read_back_byte_for_byte() {
    let (outputs, _) = outputs(1 << 20, 1 << 20, 1 << 30);
    let stored = outputs
        .upload(RUN, "alice", "report.csv", Some("text/csv; charset=utf-8"), body(&[b"a,b\n", b"1,2\n"]))
        .await
        .unwrap();
    assert_eq!(stored.size, 8);
    assert_eq!(stored.media_type, "text/csv");
    let expected: String = sha2::Sha256::digest(b"a,b\n1,2\n").iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(stored.sha256, expected);
    assert_eq!(outputs.recorded("ns", "uid-1").await.unwrap(), vec![stored]);
    assert_eq!(read_all(&outputs, "report.csv").await.unwrap(), b"a,b\n1,2\n");
    // Another run (another uid) sees none of it.
    assert!(outputs.recorded("ns", "uid-2").await.unwrap().is_empty());
    assert!(outputs.read("ns", "uid-2", "report.csv").await.is_err());
}

#[tokio::test]
async fn names_that_would_leave_the_runs_prefix_are_refused() {
    let (outputs, memory) = outputs(1 << 20, 1 << 20, 1 << 30);
    for name in ["../other/x", "a/b", ".meta", "/etc/passwd", "..", "x\u{202e}y"] {
        let refused = outputs.upload(RUN, "alice", name, None, body(&[b"x"])).await.unwrap_err();
        assert_eq!(refused.status, 400, "{name}");
    }
    let listed: Vec<_> = memory.list(None).try_collect().await.unwrap();
    assert!(listed.is_empty(), "nothing was stored: {listed:?}");
}

#[tokio::test]
async fn every_bound_is_held_and_a_refused_upload_leaves_nothing() {
    let (outputs, memory) = outputs(10, 15, 1 << 30);
    let refused = outputs.upload(RUN, "alice", "big", None, body(&[b"123456", b"78901"])).await.unwrap_err();
    assert_eq!(refused.status, 413);
    assert!(refused.message.contains("10 bytes per file"), "{}", refused.message);
    outputs.upload(RUN, "alice", "a", None, body(&[b"1234567890"])).await.unwrap();
    let refused = outputs.upload(RUN, "alice", "b", None, body(&[b"123456"])).await.unwrap_err();
    assert!(refused.message.contains("15 bytes per run"), "{}", refused.message);
    // Replacing a file counts only the new bytes.
    outputs.upload(RUN, "alice", "a", None, body(&[b"12345678"])).await.unwrap();
    let listed: Vec<_> = memory.list(None).try_collect().await.unwrap();
    assert_eq!(listed.len(), 2, "one file and its record: {listed:?}");

    let (outputs, _) = outputs_total(12);
    outputs.upload(RUN, "alice", "a", None, body(&[b"12345678"])).await.unwrap();
    let refused =
        outputs.upload(["ns", "other", "uid-9"], "bob", "a", None, body(&[b"12345678"])).await.unwrap_err();
    assert_eq!((refused.status, refused.retry_after), (507, Some(60)));
    assert!(refused.message.contains("store is full"), "{}", refused.message);
}

fn outputs_total(total: u64) -> (Outputs, Arc<InMemory>) {
    outputs(1 << 20, 1 << 20, total)
}

#[tokio::test]
async fn a_run_hands_over_at_most_its_count_of_files() {
    let (outputs, _) = outputs(1 << 20, 1 << 20, 1 << 30);
    for i in 0..MAX_OUTPUTS {
        outputs.upload(RUN, "alice", &format!("f{i}"), None, body(&[b"x"])).await.unwrap();
    }
    let refused = outputs.upload(RUN, "alice", "one-more", None, body(&[b"x"])).await.unwrap_err();
    assert_eq!(refused.status, 413);
    // Replacing one is still allowed.
    outputs.upload(RUN, "alice", "f0", None, body(&[b"y"])).await.unwrap();
    assert_eq!(outputs.recorded("ns", "uid-1").await.unwrap().len(), MAX_OUTPUTS);
}

#[tokio::test]
async fn a_planted_or_changed_object_is_never_served() {
    let (outputs, memory) = outputs(1 << 20, 1 << 20, 1 << 30);
    // Planted without a record: not a file of the run.
    memory
        .put(&Path::from(object_key("ns", "uid-1", "planted")), PutPayload::from_static(b"evil"))
        .await
        .unwrap();
    assert!(read_all(&outputs, "planted").await.unwrap_err().contains("no file"));
    // Changed after it was recorded: the read fails rather than end whole.
    outputs.upload(RUN, "alice", "report.csv", None, body(&[b"good"])).await.unwrap();
    memory
        .put(&Path::from(object_key("ns", "uid-1", "report.csv")), PutPayload::from_static(b"evil"))
        .await
        .unwrap();
    assert!(read_all(&outputs, "report.csv").await.unwrap_err().contains("changed in the store"));
    // A forged record (planted in the store under another name) is ignored.
    let forged = br#"{"name":"x","mediaType":"text/plain","size":4,"sha256":"0000000000000000000000000000000000000000000000000000000000000000"}"#;
    memory.put(&Path::from("runs/ns/uid-1/.meta/y"), PutPayload::from_static(forged)).await.unwrap();
    let names: Vec<String> =
        outputs.recorded("ns", "uid-1").await.unwrap().into_iter().map(|o| o.name).collect();
    assert_eq!(names, ["report.csv"]);
}

#[tokio::test]
async fn forgetting_a_run_deletes_its_files_and_no_others() {
    let (outputs, memory) = outputs(1 << 20, 1 << 20, 1 << 30);
    outputs.upload(RUN, "alice", "a", None, body(&[b"x"])).await.unwrap();
    outputs.upload(["ns", "run2", "uid-2"], "alice", "a", None, body(&[b"x"])).await.unwrap();
    outputs.forget("ns", "uid-1").await;
    let left: Vec<String> = memory.list(None).map_ok(|m| m.location.to_string()).try_collect().await.unwrap();
    assert_eq!(left, ["runs/ns/uid-2/.meta/a", "runs/ns/uid-2/a"]);
}

fn shared(caller_bytes: u64, uploads_per_caller: usize) -> Arc<Outputs> {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let limits = Limits {
        file_bytes: 1 << 20,
        run_bytes: 1 << 20,
        total_bytes: 1 << 30,
        uploads_at_once: 8,
        caller_bytes,
        uploads_per_caller,
    };
    Arc::new(Outputs::with_store(store, limits))
}

/// An upload that sends one byte, then nothing until `release` is dropped.
fn stalled() -> (
    impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Unpin + Send,
    tokio::sync::oneshot::Sender<()>,
) {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let first = futures::stream::once(async { Ok(Bytes::from_static(b"x")) });
    let rest = futures::stream::once(async move {
        let _ = released.await;
        Ok(Bytes::from_static(b"y"))
    });
    (Box::pin(first.chain(rest)), release)
}

#[tokio::test(start_paused = true)]
async fn a_trickling_upload_is_cut_by_the_minimum_rate_not_after_the_idle_minute() {
    // Red team round 5: one byte every 15 s held an upload slot for ever.
    let outputs = shared(1 << 30, 8);
    let trickle = futures::stream::unfold(0u32, |sent| async move {
        tokio::time::sleep(std::time::Duration::from_secs(15)).await;
        (sent < 100).then(|| (Ok::<_, std::io::Error>(Bytes::from_static(b"x")), sent + 1))
    });
    let began = tokio::time::Instant::now();
    let refused = outputs.upload(RUN, "alice", "slow", None, Box::pin(trickle)).await.unwrap_err();
    assert_eq!(refused.status, 408, "{}", refused.message);
    assert!(refused.message.contains("slower than"), "{}", refused.message);
    assert!(began.elapsed() <= super::store::RATE_GRACE, "cut within the grace: {:?}", began.elapsed());
    // A fast one goes through, however long it is.
    let fast = body(&[&[b'a'; 100_000], &[b'b'; 100_000]]);
    outputs.upload(RUN, "alice", "fast", None, fast).await.unwrap();
}

#[test]
fn patience_grows_with_what_was_sent() {
    use super::store::{IDLE_UPLOAD, MIN_UPLOAD_BYTES_PER_SECOND, RATE_GRACE, patience};
    let second = std::time::Duration::from_secs(1);
    assert_eq!(patience(std::time::Duration::ZERO, 0), (RATE_GRACE, true));
    assert_eq!(patience(RATE_GRACE, 0), (std::time::Duration::ZERO, true));
    let plenty = MIN_UPLOAD_BYTES_PER_SECOND * 1_000;
    assert_eq!(patience(second, plenty), (IDLE_UPLOAD, false), "ahead of the rate: only idleness cuts");
}

#[tokio::test]
async fn one_callers_uploads_never_hold_every_slot_nor_fill_the_store() {
    // Red team round 5: a tool's run held all 8 upload slots; a caller's
    // runs filled the store every caller shares.
    let outputs = shared(12, 2);
    let mut held = Vec::new();
    let mut streaming = Vec::new();
    for i in 0..2 {
        let (stream, release) = stalled();
        let outputs = outputs.clone();
        streaming.push(tokio::spawn(async move {
            outputs.upload(["ns", "b-run", "uid-b"], "bob", &format!("f{i}"), None, stream).await
        }));
        held.push(release);
    }
    let_spawned_run().await;
    let (stream, _release) = stalled();
    let refused = outputs.upload(["ns", "b-run", "uid-b"], "bob", "third", None, stream).await.unwrap_err();
    assert_eq!((refused.status, refused.retry_after), (503, Some(5)), "{}", refused.message);
    assert!(
        refused.message.contains("this caller's runs") && !refused.message.contains("alice"),
        "{}",
        refused.message
    );
    // Another caller still uploads at once.
    outputs.upload(RUN, "alice", "mine", None, body(&[b"12"])).await.unwrap();
    drop(held);
    for upload in streaming {
        upload.await.unwrap().unwrap();
    }
    // Bob's share of bytes (12): his two files hold 4, 8 more fit, then no more.
    outputs.upload(["ns", "b-run2", "uid-b2"], "bob", "big", None, body(&[b"12345678"])).await.unwrap();
    let refused =
        outputs.upload(["ns", "b-run3", "uid-b3"], "bob", "more", None, body(&[b"1"])).await.unwrap_err();
    assert_eq!((refused.status, refused.retry_after), (507, Some(60)), "{}", refused.message);
    assert!(refused.message.contains("one caller's share"), "{}", refused.message);
    // Alice's share is her own.
    outputs.upload(["ns", "a-run2", "uid-a2"], "alice", "big", None, body(&[b"12345678"])).await.unwrap();
}

/// Lets the spawned uploads (on this one-thread runtime) take their slots.
async fn let_spawned_run() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}
