//! One long-lived HTTP/1.1 response read as it arrives: the messages of an
//! SSE stream (a `subscriptions/listen`), or the one JSON body of a refusal.
//! The exchange helpers in [`crate::mcp`] read a response to its end, which
//! a listen never reaches while it is held.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response being read: its head, and its messages as they come.
pub struct SseStream {
    stream: Option<TcpStream>,
    pub status: u16,
    pub head: String,
    /// Bytes read and not yet de-chunked.
    raw: Vec<u8>,
    chunked: bool,
    /// De-chunked body not yet split into events.
    body: String,
    messages: VecDeque<Value>,
    ended: bool,
}

impl SseStream {
    /// POSTs `body` with `head` (request line and headers, each ending in
    /// CRLF, without Content-Length) and reads the response head.
    pub async fn open(addr: SocketAddr, head: &str, body: &str) -> Self {
        let mut stream = TcpStream::connect(addr).await.expect("connect to the frontend");
        let request = format!("{head}Content-Length: {}\r\n\r\n{body}", body.len());
        stream.write_all(request.as_bytes()).await.expect("send the request");
        let mut this = Self {
            stream: Some(stream),
            status: 0,
            head: String::new(),
            raw: Vec::new(),
            chunked: false,
            body: String::new(),
            messages: VecDeque::new(),
            ended: false,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !this.raw.windows(4).any(|w| w == b"\r\n\r\n") {
            assert!(this.read_some(deadline).await, "the response head did not arrive within 30 s");
        }
        let at = this.raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_default();
        this.head = String::from_utf8_lossy(&this.raw[..at]).to_string();
        this.raw.drain(..at + 4);
        this.status = this.head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        this.chunked = this.head.to_ascii_lowercase().contains("transfer-encoding: chunked");
        this
    }

    /// Whether the response is an event stream (else one JSON body).
    pub fn is_event_stream(&self) -> bool {
        self.head.to_ascii_lowercase().contains("content-type: text/event-stream")
    }

    /// The next message, waiting at most `within`; `None` when none came
    /// in time or the response ended.
    pub async fn next(&mut self, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            self.parse();
            if let Some(message) = self.messages.pop_front() {
                return Some(message);
            }
            if self.ended || !self.read_some(deadline).await {
                self.parse();
                return self.messages.pop_front();
            }
        }
    }

    /// Whether the server ended the response (read to its end within `within`).
    pub async fn ends_within(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while !self.ended {
            if !self.read_some(deadline).await && !self.ended {
                return false;
            }
        }
        true
    }

    /// Reads what arrives before `deadline`; false when nothing did.
    async fn read_some(&mut self, deadline: tokio::time::Instant) -> bool {
        let Some(stream) = self.stream.as_mut() else { return false };
        let mut buffer = [0u8; 16 * 1024];
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                self.ended = true;
                self.stream = None;
                true
            }
            Ok(Ok(read)) => {
                self.raw.extend_from_slice(&buffer[..read]);
                true
            }
            Err(_) => false,
        }
    }

    /// Moves complete chunks into the body and complete events into messages.
    fn parse(&mut self) {
        if self.chunked {
            while let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") {
                let size_text = String::from_utf8_lossy(&self.raw[..line_end]).to_string();
                let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                    .unwrap_or_else(|_| panic!("bad chunk size line {size_text:?}"));
                if size == 0 {
                    self.ended = true;
                    self.raw.clear();
                    break;
                }
                let start = line_end + 2;
                if self.raw.len() < start + size + 2 {
                    break;
                }
                self.body.push_str(&String::from_utf8_lossy(&self.raw[start..start + size]));
                self.raw.drain(..start + size + 2);
            }
        } else {
            self.body.push_str(&String::from_utf8_lossy(&self.raw));
            self.raw.clear();
        }
        if !self.is_event_stream() {
            // One JSON body, whole once its length has arrived or the response ended.
            let length = self.head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse::<usize>().ok())?
            });
            let whole = length.map_or(self.ended, |length| self.body.len() >= length);
            if whole && !self.body.trim().is_empty() {
                let body = std::mem::take(&mut self.body);
                self.messages.push_back(serde_json::from_str(body.trim()).expect(&body));
            }
            return;
        }
        let body = self.body.replace("\r\n", "\n");
        let mut rest = body.as_str();
        while let Some(end) = rest.find("\n\n") {
            let event = &rest[..end];
            let data: Vec<&str> =
                event.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim_start).collect();
            if !data.is_empty() {
                let text = data.join("\n");
                self.messages.push_back(serde_json::from_str(&text).expect(&text));
            }
            rest = &rest[end + 2..];
        }
        self.body = rest.to_string();
    }
}

/// The 2026-07-28 Tasks extension's capability, declared in a request's `_meta`.
pub const TASKS_DECLARED: &str = r#"{"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}"#;

/// The request head of a 2026-07-28 `subscriptions/listen` as `token`.
pub fn listen_head(token: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: subscriptions/listen\r\nAuthorization: Bearer {token}\r\n"
    )
}

/// Opens a `subscriptions/listen` on the frontend at `addr` as `token`, with
/// request id `id`, asking for `notifications` (declaring the Tasks
/// extension when `declare`).
pub async fn listen(
    addr: SocketAddr,
    token: &str,
    id: &str,
    notifications: Value,
    declare: bool,
) -> SseStream {
    let meta: Value = if declare { serde_json::from_str(TASKS_DECLARED).unwrap() } else { json!({}) };
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {"notifications": notifications, "_meta": meta}});
    SseStream::open(addr, &listen_head(token), &body.to_string()).await
}
