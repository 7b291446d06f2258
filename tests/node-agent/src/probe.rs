//! httpGet probes, as a kubelet runs them: readiness decides the Pod's Ready
//! condition (and so Deployments' availability and Services' Endpoints),
//! liveness failures restart the container.

use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One probe's schedule and state.
#[derive(Debug)]
pub struct ProbeState {
    path: String,
    port: u16,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
    successes: u32,
    failures: u32,
    next: tokio::time::Instant,
}

/// What a probe concluded after a run, if anything changed.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Unchanged,
    Passing,
    Failing,
}

impl ProbeState {
    /// The probe's state for a container started now; `None` without an httpGet probe.
    pub fn new(probe: Option<&Probe>, container: &Container) -> Option<Self> {
        let probe = probe?;
        let get = probe.http_get.as_ref()?;
        let port = match &get.port {
            IntOrString::Int(port) => u16::try_from(*port).ok()?,
            IntOrString::String(name) => container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())?,
        };
        let seconds = |value: Option<i32>, default: u64| {
            Duration::from_secs(value.map_or(default, |v| v.max(0) as u64))
        };
        let initial_delay = seconds(probe.initial_delay_seconds, 0);
        Some(Self {
            path: get.path.clone().unwrap_or_else(|| "/".into()),
            port,
            period: seconds(probe.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: seconds(probe.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: probe.success_threshold.map_or(1, |v| v.max(1) as u32),
            failure_threshold: probe.failure_threshold.map_or(3, |v| v.max(1) as u32),
            successes: 0,
            failures: 0,
            next: tokio::time::Instant::now() + initial_delay,
        })
    }

    /// Runs the probe when it is due; says whether it crossed a threshold.
    pub async fn tick(&mut self, ip: Ipv4Addr) -> Verdict {
        let now = tokio::time::Instant::now();
        if now < self.next {
            return Verdict::Unchanged;
        }
        self.next = now + self.period;
        if http_get(ip, self.port, &self.path, self.timeout).await {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            if self.successes == self.success_threshold { Verdict::Passing } else { Verdict::Unchanged }
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.failures == self.failure_threshold { Verdict::Failing } else { Verdict::Unchanged }
        }
    }
}

/// GET http://ip:port/path: true for a 2xx or 3xx answer within `timeout`.
pub async fn http_get(ip: Ipv4Addr, port: u16, path: &str, timeout: Duration) -> bool {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/node-agent\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut head = [0u8; 16];
        let read = stream.read(&mut head).await.ok()?;
        let line = std::str::from_utf8(&head[..read]).ok()?;
        let code: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some((200..400).contains(&code))
    };
    matches!(tokio::time::timeout(timeout, exchange).await, Ok(Some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction};

    fn probe(port: IntOrString) -> Probe {
        Probe {
            http_get: Some(HTTPGetAction { path: Some("/readyz".into()), port, ..Default::default() }),
            period_seconds: Some(1),
            failure_threshold: Some(2),
            ..Default::default()
        }
    }

    #[test]
    fn named_ports_resolve_and_defaults_apply() {
        let container = Container {
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let state = ProbeState::new(Some(&probe(IntOrString::String("http".into()))), &container).unwrap();
        assert_eq!(
            (state.port, state.path.as_str(), state.failure_threshold, state.success_threshold),
            (8080, "/readyz", 2, 1)
        );
        assert!(ProbeState::new(Some(&probe(IntOrString::String("nope".into()))), &container).is_none());
        assert!(ProbeState::new(None, &container).is_none());
    }

    #[tokio::test]
    async fn a_server_that_answers_passes_and_a_closed_port_fails_after_the_threshold() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buffer = [0u8; 512];
                let _ = socket.read(&mut buffer).await;
                let _ = socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
            }
        });
        let container = Container::default();
        let mut up = ProbeState::new(Some(&probe(IntOrString::Int(i32::from(port)))), &container).unwrap();
        assert_eq!(up.tick(Ipv4Addr::LOCALHOST).await, Verdict::Passing);
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut down =
            ProbeState::new(Some(&probe(IntOrString::Int(i32::from(closed)))), &container).unwrap();
        assert_eq!(
            down.tick(Ipv4Addr::LOCALHOST).await,
            Verdict::Unchanged,
            "one failure is below the threshold"
        );
        down.next = tokio::time::Instant::now();
        assert_eq!(down.tick(Ipv4Addr::LOCALHOST).await, Verdict::Failing);
    }
}
