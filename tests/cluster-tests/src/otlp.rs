//! A real OTLP/HTTP trace receiver for the tests: it accepts what any
//! OpenTelemetry SDK exports to `/v1/traces` (protobuf, as the collector
//! protocol defines it, decoded with the protocol's own generated types)
//! and keeps every span it was sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One span as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedSpan {
    /// The exporting process's `service.name`.
    pub service: String,
    pub name: String,
    /// 32 lowercase hex digits.
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
}

/// The receiver; it serves until dropped.
pub struct OtlpReceiver {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the OTLP receiver");
        let addr = listener.local_addr().expect("its address");
        let spans: Arc<Mutex<Vec<ReceivedSpan>>> = Arc::default();
        let kept = spans.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_connection(stream, kept.clone()));
            }
        });
        Self { addr, spans, task }
    }

    /// The base URL for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the requests of one keep-alive connection.
async fn serve_connection(mut stream: tokio::net::TcpStream, spans: Arc<Mutex<Vec<ReceivedSpan>>>) {
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let head_end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        let body_start = head_end + 4;
        while buffer.len() < body_start + length {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        }
        let body: Vec<u8> = buffer[body_start..body_start + length].to_vec();
        buffer.drain(..body_start + length);
        let (status, reply) = match ExportTraceServiceRequest::decode(body.as_slice()) {
            Ok(request) if head.starts_with("POST /v1/traces ") => {
                spans.lock().unwrap_or_else(|p| p.into_inner()).extend(received(request));
                ("200 OK", Vec::new())
            }
            Ok(_) => ("404 Not Found", Vec::new()),
            Err(err) => ("400 Bad Request", err.to_string().into_bytes()),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
            reply.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() || stream.write_all(&reply).await.is_err() {
            return;
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn received(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|resource| &resource.attributes)
            .find(|attribute| attribute.key == "service.name")
            .and_then(|attribute| match attribute.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(name) => Some(name.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                out.push(ReceivedSpan {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                });
            }
        }
    }
    out
}
