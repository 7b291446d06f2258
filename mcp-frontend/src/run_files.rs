//! A run's files, read from the operator's outputs server (which alone
//! talks to the store): one signed, short-lived `GET` per read, streamed
//! through — never held whole — and bounded in number at once.

use std::time::Duration;

use crate::slots::{OwnedWaitSlot, WaitCap, WaitSlots};
use bytes::Bytes;
use futures::Stream;
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mining_api::ToolRun;
use mining_api::ownership::OwnershipKeys;
use mining_api::tool_outputs::ToolOutput;

/// How long a read token lives: long enough for the request, no longer.
const READ_TOKEN_SECONDS: u64 = 60;
/// How long the operator may take to start answering.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);
/// How long a read may pause between chunks before it is cut.
pub const IDLE_READ: Duration = Duration::from_secs(60);

/// Why a file cannot be read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The run has no such file (any longer).
    Missing,
    /// Too many reads at once, or the operator's server is unreachable: try again.
    Busy { message: String, retry_after_seconds: u64 },
}

pub struct RunFiles {
    base: String,
    client: Client<HttpConnector, http_body_util::Empty<Bytes>>,
    /// Reads at once: in all, and per caller (a quarter, at least one), so
    /// one caller's stalled reads never hold every slot (red team, round 5).
    reads: std::sync::Arc<WaitSlots>,
}

impl RunFiles {
    /// Reads from the outputs server at `base` (`--outputs-url`), at most
    /// `max_reads` at once, a quarter of them (at least one) per caller.
    pub fn new(base: &str, max_reads: usize) -> Self {
        let max_reads = max_reads.max(1);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        Self {
            base: base.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build(connector),
            reads: std::sync::Arc::new(WaitSlots::new((max_reads / 4).max(1), max_reads)),
        }
    }

    /// The bytes of `output` of `run`, read for the caller labelled
    /// `caller_label`, as a stream that holds one of its read slots until it ends.
    pub async fn open(
        &self,
        keys: &OwnershipKeys,
        caller_label: &str,
        run: &ToolRun,
        output: &ToolOutput,
    ) -> Result<impl Stream<Item = Result<Bytes, std::io::Error>> + Send + use<>, ReadError> {
        let busy = |message: String| ReadError::Busy { message, retry_after_seconds: 5 };
        let permit = self.reads.take_owned(caller_label).map_err(|cap| {
            let (per_caller, total) = self.reads.caps();
            busy(match cap {
                WaitCap::PerCaller => format!(
                    "this caller is already reading as many files at once as one caller may on this replica \
                     ({per_caller})"
                ),
                WaitCap::Total => format!("{total} files are being read at once (this replica's limit)"),
            })
        })?;
        let ids = [
            run.metadata.namespace.as_deref().unwrap_or_default(),
            run.metadata.name.as_deref().unwrap_or_default(),
            run.metadata.uid.as_deref().unwrap_or_default(),
        ];
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let expires = now + READ_TOKEN_SECONDS;
        let token = keys.outputs_read_token(ids, &output.name, expires);
        let uri = format!(
            "{}/v1/outputs/{}/{}/{}/{}?expires={expires}",
            self.base, ids[0], ids[1], ids[2], output.name
        );
        let request = http::Request::get(uri)
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(http_body_util::Empty::new())
            .map_err(|err| busy(format!("cannot ask the operator for the file: {err}")))?;
        let response = match tokio::time::timeout(ANSWER_WITHIN, self.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => {
                return Err(busy(format!("the operator's outputs server cannot be reached: {err}")));
            }
            Err(_) => return Err(busy("the operator's outputs server did not answer in time".into())),
        };
        match response.status().as_u16() {
            200 => {}
            404 => return Err(ReadError::Missing),
            code => return Err(busy(format!("the operator's outputs server answered {code}"))),
        }
        let stated = response.headers().get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok());
        if stated != Some(output.size.to_string().as_str()) {
            return Err(busy("the operator's outputs server sent another size than was recorded".into()));
        }
        Ok(frames(response.into_body(), permit))
    }
}

fn frames(
    body: hyper::body::Incoming,
    permit: OwnedWaitSlot,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures::stream::unfold(Some((body, permit)), |state| async move {
        let (mut body, permit) = state?;
        loop {
            match tokio::time::timeout(IDLE_READ, body.frame()).await {
                Err(_) => return Some((Err(std::io::Error::other("the file stopped coming")), None)),
                Ok(None) => return None,
                Ok(Some(Err(err))) => return Some((Err(std::io::Error::other(err)), None)),
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => return Some((Ok(data), Some((body, permit)))),
                    Err(_) => continue,
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// An outputs server that starts every answer and never finishes it,
    /// as a stalled reader leaves a read.
    async fn stalling_server() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let _ = socket.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc").await;
                held.push(socket);
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn one_callers_reads_never_hold_every_slot() {
        // Red team round 5: one caller's stalled reads held every read slot.
        let files = RunFiles::new(&stalling_server().await, 4);
        let keys = OwnershipKeys::new(vec![7; 32], None).unwrap();
        let run = mining_api::testing::tool_run_with_files(Some(mining_api::ToolRunPhase::Succeeded), &["f"]);
        let output = ToolOutput {
            name: "f".into(),
            media_type: "text/plain".into(),
            size: 10,
            sha256: "0".repeat(64),
        };
        let held = files.open(&keys, "bob", &run, &output).await.expect("bob's first read");
        let Err(ReadError::Busy { message, .. }) = files.open(&keys, "bob", &run, &output).await else {
            panic!("bob's second read at once is refused")
        };
        assert!(message.contains("as many files at once as one caller may"), "{message}");
        let mut others = Vec::new();
        for caller in ["alice", "carol", "dave"] {
            others.push(
                files.open(&keys, caller, &run, &output).await.unwrap_or_else(|_| panic!("{caller} reads")),
            );
        }
        let Err(ReadError::Busy { message, .. }) = files.open(&keys, "erin", &run, &output).await else {
            panic!("past the replica's limit")
        };
        assert!(message.contains("4 files are being read at once"), "{message}");
        drop(held);
        let again = files.open(&keys, "bob", &run, &output).await;
        assert!(again.is_ok(), "a slot given back is bob's again");
        drop(others);
    }
}
