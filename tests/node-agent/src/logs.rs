//! The kubelet's `containerLogs` endpoint, so that `kubectl logs` works: the
//! API server (with `--kubelet-preferred-address-types InternalIP`) asks
//! `GET /containerLogs/NS/POD/CONTAINER` over HTTPS at the Node's address and
//! the port the Node reports. Loopback only, with a certificate `cluster.sh`
//! makes (the API server, given no `--kubelet-certificate-authority`, does
//! not verify it) and no client authentication, as a test cluster's kubelet; `tailLines`, `limitBytes` and `follow` are
//! honoured, `timestamps` and `previous` are not (each container's log spans
//! its restarts).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A request head larger than this is refused.
const MAX_HEAD: usize = 16 * 1024;

/// What a `containerLogs` request asks for.
#[derive(Debug, Default, PartialEq)]
pub struct LogRequest {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub follow: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
}

/// Parses `GET /containerLogs/NS/POD/CONTAINER?query HTTP/1.1`; `None` for
/// anything else (or a name that could leave the state directory).
pub fn parse_request_line(line: &str) -> Option<LogRequest> {
    let mut words = line.split_whitespace();
    let (method, target) = (words.next()?, words.next()?);
    if method != "GET" {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let parts: Vec<&str> = path.strip_prefix("/containerLogs/")?.split('/').collect();
    let [namespace, pod, container] = parts.as_slice() else { return None };
    let valid = |name: &str| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            && name != ".."
    };
    if ![namespace, pod, container].iter().all(|name| valid(name)) {
        return None;
    }
    let mut request = LogRequest {
        namespace: namespace.to_string(),
        pod: pod.to_string(),
        container: container.to_string(),
        ..Default::default()
    };
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "follow" => request.follow = value == "true" || value == "1",
            "tailLines" => request.tail_lines = value.parse().ok(),
            "limitBytes" => request.limit_bytes = value.parse().ok(),
            _ => {}
        }
    }
    Some(request)
}

/// The last `lines` lines of `text`.
pub fn tail(text: &[u8], lines: usize) -> &[u8] {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut seen = 0;
    for (at, byte) in body.iter().enumerate().rev() {
        if *byte == b'\n' {
            seen += 1;
            if seen == lines {
                return &text[at + 1..];
            }
        }
    }
    if lines == 0 { &text[text.len()..] } else { text }
}

/// The newest directory of a Pod with this namespace and name (a Pod
/// re-created under the same name has a new uid, hence a new directory).
fn pod_dir(state_dir: &Path, namespace: &str, pod: &str) -> Option<PathBuf> {
    let prefix = format!("{namespace}_{pod}_");
    std::fs::read_dir(state_dir.join("pods"))
        .ok()?
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .max_by_key(|entry| entry.metadata().and_then(|m| m.modified()).ok())
        .map(|entry| entry.path())
}

/// The TLS server side from a PEM certificate (chain) and key.
pub fn acceptor(certificate: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(certificate)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| format!("{}: {err}", certificate.display()))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|err| format!("{}: {err}", key.display()))?;
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|err| err.to_string())?;
    Ok(TlsAcceptor::from(std::sync::Arc::new(config)))
}

pub async fn serve(listener: TcpListener, tls: TlsAcceptor, state_dir: PathBuf) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let state_dir = state_dir.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(Duration::from_secs(10), tls.accept(stream)).await;
            let Ok(Ok(stream)) = handshake else { return };
            if let Err(err) = answer(stream, &state_dir).await {
                tracing::debug!(error = %err, "containerLogs request ended");
            }
        });
    }
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, state_dir: &Path) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await??;
        if read == 0 || head.len() + read > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let line = String::from_utf8_lossy(head.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
    let Some(request) = parse_request_line(&line) else {
        return respond(&mut stream, "404 Not Found", b"not found\n").await;
    };
    let Some(dir) = pod_dir(state_dir, &request.namespace, &request.pod) else {
        return respond(&mut stream, "404 Not Found", b"no such pod on this node\n").await;
    };
    let log = dir.join(format!("{}.log", request.container));
    let Ok(text) = tokio::fs::read(&log).await else {
        return respond(&mut stream, "404 Not Found", b"no log for this container yet\n").await;
    };
    let mut body = match request.tail_lines {
        Some(lines) => tail(&text, lines),
        None => &text[..],
    };
    if let Some(limit) = request.limit_bytes {
        body = &body[..body.len().min(limit)];
    }
    if !request.follow {
        return respond(&mut stream, "200 OK", body).await;
    }
    // Following: the body ends when the connection closes; new bytes are
    // sent as they are written, until the container has exited.
    let header = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n";
    stream.write_all(header.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut offset = text.len() as u64;
    let pgid = dir.join(format!("{}.pgid", request.container));
    loop {
        let running = pgid.exists();
        let mut file = tokio::fs::File::open(&log).await?;
        let mut fresh = Vec::new();
        use tokio::io::AsyncSeekExt;
        file.seek(std::io::SeekFrom::Start(offset)).await?;
        file.read_to_end(&mut fresh).await?;
        offset += fresh.len() as u64;
        stream.write_all(&fresh).await?;
        if !running {
            return stream.shutdown().await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn respond<S: AsyncWrite + Unpin>(stream: &mut S, status: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_name_a_container_and_nothing_outside_the_state_dir() {
        let request =
            parse_request_line("GET /containerLogs/ns/pod-1/miner?follow=true&tailLines=5 HTTP/1.1").unwrap();
        assert_eq!(
            (request.namespace.as_str(), request.pod.as_str(), request.container.as_str()),
            ("ns", "pod-1", "miner")
        );
        assert!(request.follow);
        assert_eq!(request.tail_lines, Some(5));
        assert_eq!(parse_request_line("GET /containerLogs/ns/../x HTTP/1.1"), None);
        assert_eq!(parse_request_line("GET /containerLogs/ns/a/b/c HTTP/1.1"), None);
        assert_eq!(parse_request_line("POST /containerLogs/ns/a/b HTTP/1.1"), None);
        assert_eq!(parse_request_line("GET /pods HTTP/1.1"), None);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", 1), b"c");
        assert_eq!(tail(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(tail(b"a\nb\n", 0), b"");
    }
}
