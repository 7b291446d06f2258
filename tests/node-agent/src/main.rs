//! node-agent: a test-only stand-in for the kubelet (and the scheduler, for
//! its one node). It registers a Node, binds pending Pods to it, runs their
//! containers as local processes and reports their status back. See README.md
//! next to this crate for where it differs from a real kubelet.

mod agent;
mod container;
mod credentials;
mod from_image;
mod image;
mod logs;
mod network;
mod node;
mod probe;
mod pull;
mod runner;
mod services;
mod volumes;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;

#[derive(Parser, Debug, Clone)]
#[command(about = "Runs a Kubernetes Node's Pods as local processes (test use only)")]
pub struct Config {
    /// Name of the Node to register.
    #[arg(long, env = "NODE_NAME", default_value = "local-node")]
    pub node_name: String,
    /// Where container logs, termination messages and process ids are kept.
    #[arg(long, default_value = "/tmp/node-agent")]
    pub state_dir: PathBuf,
    /// Maps an image (repository, without tag) to a local binary: IMAGE=PATH. Repeatable.
    #[arg(long = "image", value_parser = parse_image_mapping)]
    pub images: Vec<(String, PathBuf)>,
    /// The registries this node pulls from, in containerd's `certs.d`
    /// layout: a directory per HOST[:PORT] holding the CA it trusts for it
    /// (`ca.crt`). Images of other registries are only found in the store.
    #[arg(long)]
    pub registry_certs: Option<PathBuf>,
    /// The podman that holds the images Pods run (anything not mapped by --image).
    #[arg(long, default_value = "podman")]
    pub podman: String,
    /// The /16 Pod IPs are taken from (from its .0.2), added to lo; one per cluster on a host.
    #[arg(long, default_value = "10.244.0.0/16", value_parser = parse_pod_cidr)]
    pub pod_cidr: std::net::Ipv4Addr,
    /// Where the kubelet endpoint for `kubectl logs` listens on 127.0.0.1.
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,
    /// The endpoint's certificate (PEM); without it there is no `kubectl logs`.
    #[arg(long, requires = "kubelet_key")]
    pub kubelet_certificate: Option<PathBuf>,
    /// The endpoint's private key (PEM).
    #[arg(long)]
    pub kubelet_key: Option<PathBuf>,
    /// Most Pods running at once; more stay Pending until one finishes.
    #[arg(long, default_value_t = 8)]
    pub max_pods: usize,
    /// CPU capacity to report.
    #[arg(long, default_value = "2")]
    pub cpu: String,
    /// Memory capacity to report.
    #[arg(long, default_value = "16Gi")]
    pub memory: String,
    /// The API server as Pods reach it (https://HOST:PORT): Pods get
    /// KUBERNETES_SERVICE_HOST/PORT and their ServiceAccount's credentials.
    #[arg(long, requires = "api_server_ca")]
    pub api_server: Option<String>,
    /// The CA certificate of --api-server, mounted into Pods as ca.crt.
    #[arg(long, requires = "api_server")]
    pub api_server_ca: Option<PathBuf>,
}

impl Config {
    /// The in-cluster API server, when configured.
    pub fn in_cluster(&self) -> anyhow::Result<Option<credentials::ApiServer>> {
        match (&self.api_server, &self.api_server_ca) {
            (Some(url), Some(ca)) => {
                Ok(Some(credentials::ApiServer::new(url, ca.clone()).map_err(anyhow::Error::msg)?))
            }
            _ => Ok(None),
        }
    }
}

/// A /16 network: its first address.
fn parse_pod_cidr(value: &str) -> Result<std::net::Ipv4Addr, String> {
    let (address, bits) = value.split_once('/').ok_or("expected A.B.0.0/16")?;
    let address: std::net::Ipv4Addr = address.parse().map_err(|e| format!("{address}: {e}"))?;
    if bits != "16" || address.octets()[2..] != [0, 0] {
        return Err("expected a /16 network, A.B.0.0/16".into());
    }
    Ok(address)
}

fn parse_image_mapping(value: &str) -> Result<(String, PathBuf), String> {
    let (image, path) = value.split_once('=').ok_or("expected IMAGE=PATH")?;
    if image.is_empty() || path.is_empty() {
        return Err("expected IMAGE=PATH".into());
    }
    Ok((image.to_string(), PathBuf::from(path)))
}

/// Binds the kubelet port, trying again for up to 10 s while it is in use: a
/// killed predecessor's threads may still hold it for a moment as they exit.
async fn listen_retrying(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Err(err)
                if err.kind() == std::io::ErrorKind::AddrInUse && tokio::time::Instant::now() < deadline =>
            {
                tracing::warn!(port, "kubelet port in use; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            bound => return bound,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = Config::parse();
    config.in_cluster().context("--api-server")?;
    std::fs::create_dir_all(config.state_dir.join("pods")).context("creating the state dir")?;
    let client = kube::Client::try_default().await.context("connecting to the API server")?;
    if let (Some(certificate), Some(key)) = (&config.kubelet_certificate, &config.kubelet_key) {
        let tls =
            logs::acceptor(certificate, key).map_err(anyhow::Error::msg).context("--kubelet-certificate")?;
        let logs = listen_retrying(config.kubelet_port)
            .await
            .with_context(|| format!("listening on 127.0.0.1:{} for containerLogs", config.kubelet_port))?;
        tokio::spawn(logs::serve(logs, tls, config.state_dir.clone()));
    }
    node::register(&client, &config).await.context("registering the Node")?;
    tokio::spawn(node::heartbeat(client.clone(), config.clone()));
    // Without root there are no addresses to add to lo and no mounts to make.
    let services = nix::unistd::geteuid().is_root().then(|| services::start(client.clone()));
    agent::run(client, config, services).await
}
