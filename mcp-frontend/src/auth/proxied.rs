//! The outbound connector of [`super::fetch`]: direct, or through the HTTP
//! proxy the environment names (`HTTPS_PROXY`, `NO_PROXY`, as curl and
//! reqwest read them) with a `CONNECT` tunnel, so a frontend behind a
//! corporate proxy reaches its identity provider. The S3 store and the
//! OTLP exporter (reqwest) read the same variables; the Kubernetes client
//! never does (the API server is in the cluster).

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

type BoxError = Box<dyn StdError + Send + Sync>;

/// Connects to each destination directly or, when the matcher intercepts
/// it, through a tunnel of its proxy (https only: plain http goes only to
/// loopback, which is never proxied).
#[derive(Clone)]
pub struct ProxiedConnector {
    direct: HttpConnector,
    matcher: Arc<Matcher>,
}

impl ProxiedConnector {
    /// Proxies as the environment says.
    pub fn from_env() -> Self {
        Self::with(Matcher::from_env())
    }

    pub fn with(matcher: Matcher) -> Self {
        let mut direct = HttpConnector::new();
        // The TLS layer above asks for https destinations; this layer opens TCP.
        direct.enforce_http(false);
        Self { direct, matcher: Arc::new(matcher) }
    }
}

impl tower::Service<Uri> for ProxiedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.direct.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        let intercept = (destination.scheme_str() == Some("https"))
            .then(|| self.matcher.intercept(&destination))
            .flatten();
        match intercept {
            Some(proxy) => {
                let mut tunnel = Tunnel::new(proxy.uri().clone(), self.direct.clone());
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                Box::pin(async move { tunnel.call(destination).await.map_err(Into::into) })
            }
            None => {
                let connecting = self.direct.call(destination);
                Box::pin(async move { connecting.await.map_err(Into::into) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tower::Service as _;

    /// A proxy that reads one request head, records it, and refuses.
    async fn refusing_proxy() -> (String, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = vec![0u8; 4096];
            let read = socket.read(&mut head).await.unwrap();
            let _ = socket.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n").await;
            String::from_utf8_lossy(&head[..read]).to_string()
        });
        (format!("http://user:secret@{address}"), seen)
    }

    #[tokio::test]
    async fn https_goes_through_the_proxy_with_its_credentials_unless_no_proxy_names_the_host() {
        let (proxy, seen) = refusing_proxy().await;
        let matcher = Matcher::builder().https(proxy.clone()).no("internal.example").build();
        let mut connector = ProxiedConnector::with(matcher);
        let refused = connector.call(Uri::from_static("https://idp.example:8443/jwks")).await;
        assert!(refused.is_err(), "the proxy refused the tunnel");
        let head = seen.await.unwrap();
        assert!(head.starts_with("CONNECT idp.example:8443 HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("Basic dXNlcjpzZWNyZXQ="), "its credentials: {head}");

        // NO_PROXY: straight to the host (which does not resolve here), never the proxy.
        let (proxy, seen) = refusing_proxy().await;
        let matcher = Matcher::builder().https(proxy).no("internal.example").build();
        let direct =
            ProxiedConnector::with(matcher).call(Uri::from_static("https://idp.internal.example/")).await;
        assert!(direct.is_err());
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(300), seen).await.is_err(),
            "not proxied"
        );
    }
}
