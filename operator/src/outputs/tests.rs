//! The store's bounds and checks, against an in-memory store (the same
//! `object_store` code paths as the embedded and S3 stores; the cluster
//! tests run both for real).

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt as _;
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
    (Outputs::with_store(store, Limits { file_bytes, run_bytes, total_bytes, uploads_at_once: 4 }), memory)
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
        .upload(RUN, "report.csv", Some("text/csv; charset=utf-8"), body(&[b"a,b\n", b"1,2\n"]))
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
        let refused = outputs.upload(RUN, name, None, body(&[b"x"])).await.unwrap_err();
        assert_eq!(refused.status, 400, "{name}");
    }
    let listed: Vec<_> = memory.list(None).try_collect().await.unwrap();
    assert!(listed.is_empty(), "nothing was stored: {listed:?}");
}

#[tokio::test]
async fn every_bound_is_held_and_a_refused_upload_leaves_nothing() {
    let (outputs, memory) = outputs(10, 15, 1 << 30);
    let refused = outputs.upload(RUN, "big", None, body(&[b"123456", b"78901"])).await.unwrap_err();
    assert_eq!(refused.status, 413);
    assert!(refused.message.contains("10 bytes per file"), "{}", refused.message);
    outputs.upload(RUN, "a", None, body(&[b"1234567890"])).await.unwrap();
    let refused = outputs.upload(RUN, "b", None, body(&[b"123456"])).await.unwrap_err();
    assert!(refused.message.contains("15 bytes per run"), "{}", refused.message);
    // Replacing a file counts only the new bytes.
    outputs.upload(RUN, "a", None, body(&[b"12345678"])).await.unwrap();
    let listed: Vec<_> = memory.list(None).try_collect().await.unwrap();
    assert_eq!(listed.len(), 2, "one file and its record: {listed:?}");

    let (outputs, _) = outputs_total(12);
    outputs.upload(RUN, "a", None, body(&[b"12345678"])).await.unwrap();
    let refused =
        outputs.upload(["ns", "other", "uid-9"], "a", None, body(&[b"12345678"])).await.unwrap_err();
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
        outputs.upload(RUN, &format!("f{i}"), None, body(&[b"x"])).await.unwrap();
    }
    let refused = outputs.upload(RUN, "one-more", None, body(&[b"x"])).await.unwrap_err();
    assert_eq!(refused.status, 413);
    // Replacing one is still allowed.
    outputs.upload(RUN, "f0", None, body(&[b"y"])).await.unwrap();
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
    outputs.upload(RUN, "report.csv", None, body(&[b"good"])).await.unwrap();
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
    outputs.upload(RUN, "a", None, body(&[b"x"])).await.unwrap();
    outputs.upload(["ns", "run2", "uid-2"], "a", None, body(&[b"x"])).await.unwrap();
    outputs.forget("ns", "uid-1").await;
    let left: Vec<String> = memory.list(None).map_ok(|m| m.location.to_string()).try_collect().await.unwrap();
    assert_eq!(left, ["runs/ns/uid-2/.meta/a", "runs/ns/uid-2/a"]);
}
