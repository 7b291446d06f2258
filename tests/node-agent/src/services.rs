//! Services without kube-proxy or cluster DNS: the agent plays both, for
//! TCP Services with a ClusterIP.
//!
//! - Proxy: each ClusterIP is added to the host's `lo` (as root, from the
//!   Service CIDR 10.96.0.0/16, which `cluster.sh down` clears), and each
//!   Service port gets a listener at `ClusterIP:port` that forwards every
//!   connection to one ready address of the Service's Endpoints, round robin
//!   (what kube-proxy's rules do). No ready address: the connection is closed.
//! - Names: every container gets an `/etc/hosts` (bind-mounted in its private
//!   mount namespace) naming each Service as cluster DNS would —
//!   `name.ns.svc.cluster.local`, `name.ns.svc`, `name.ns`, and `name` within
//!   the Pod's own namespace. It is written when the container starts, so a
//!   Service created later is not resolvable from it (cluster DNS would be).

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

/// One TCP port of one Service, as the proxy serves it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePort {
    pub namespace: String,
    pub name: String,
    pub cluster_ip: Ipv4Addr,
    pub port: u16,
    /// The port's name, which Endpoints repeat (empty for a lone unnamed port).
    pub port_name: String,
}

/// The ClusterIP of a Service, when it has a usable one (not headless, IPv4).
fn cluster_ip(service: &Service) -> Option<Ipv4Addr> {
    service.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()
}

/// The TCP ports the proxy serves for `service`.
pub fn service_ports(service: &Service) -> Vec<ServicePort> {
    let Some(ip) = cluster_ip(service) else { return Vec::new() };
    let spec = service.spec.as_ref().expect("cluster_ip found a spec");
    spec.ports
        .iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .filter_map(|p| {
            Some(ServicePort {
                namespace: service.metadata.namespace.clone()?,
                name: service.metadata.name.clone()?,
                cluster_ip: ip,
                port: u16::try_from(p.port).ok()?,
                port_name: p.name.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// The ready addresses behind one Service port, in the Endpoints' order.
pub fn ready_backends(endpoints: &Endpoints, port_name: &str) -> Vec<SocketAddr> {
    let mut backends = Vec::new();
    for subset in endpoints.subsets.iter().flatten() {
        let port = subset
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name)
            .and_then(|p| u16::try_from(p.port).ok());
        let Some(port) = port else { continue };
        for address in subset.addresses.iter().flatten() {
            if let Ok(ip) = address.ip.parse::<Ipv4Addr>() {
                backends.push(SocketAddr::from((ip, port)));
            }
        }
    }
    backends
}

/// The `/etc/hosts` of a container of a Pod in `namespace` named `hostname`.
pub fn render_hosts<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    hostname: &str,
    pod_ip: Ipv4Addr,
) -> String {
    let mut lines = BTreeMap::new();
    for service in services {
        let (Some(ip), Some(ns), Some(name)) =
            (cluster_ip(service), service.metadata.namespace.as_deref(), service.metadata.name.as_deref())
        else {
            continue;
        };
        let mut names = format!("{name}.{ns}.svc.cluster.local {name}.{ns}.svc {name}.{ns}");
        if ns == namespace {
            names.push(' ');
            names.push_str(name);
        }
        lines.insert((ns.to_string(), name.to_string()), format!("{ip}\t{names}"));
    }
    let mut hosts =
        format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{pod_ip}\t{hostname}\n");
    for line in lines.values() {
        hosts.push_str(line);
        hosts.push('\n');
    }
    hosts
}

/// What containers need to see of the Services: the cached Service objects.
#[derive(Clone)]
pub struct ServiceDirectory {
    services: Store<Service>,
}

impl ServiceDirectory {
    pub fn hosts(&self, namespace: &str, hostname: &str, pod_ip: Ipv4Addr) -> String {
        let services = self.services.state();
        render_hosts(services.iter().map(|s| s.as_ref()), namespace, hostname, pod_ip)
    }
}

/// Starts the proxy; returns the directory the agent renders hosts files from.
pub fn start(client: kube::Client) -> ServiceDirectory {
    let (endpoints, endpoints_writer) = reflector::store::<Endpoints>();
    let endpoint_events = watcher(Api::<Endpoints>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(endpoints_writer)
        .for_each(|_| async {});
    tokio::spawn(endpoint_events);

    let (services, services_writer) = reflector::store::<Service>();
    let directory = ServiceDirectory { services: services.clone() };
    let service_events = watcher(Api::<Service>::all(client), watcher::Config::default())
        .default_backoff()
        .reflect(services_writer);
    tokio::spawn(async move {
        let mut proxy = Proxy { endpoints, listeners: HashMap::new() };
        let mut service_events = std::pin::pin!(service_events);
        while let Some(event) = service_events.next().await {
            if let Err(err) = event {
                tracing::warn!(error = %err, "service watch error");
                continue;
            }
            let mut wanted: Vec<ServicePort> =
                services.state().iter().flat_map(|s| service_ports(s)).collect();
            wanted.sort();
            proxy.sync(&wanted);
        }
    });
    directory
}

struct Proxy {
    endpoints: Store<Endpoints>,
    listeners: HashMap<ServicePort, tokio::task::JoinHandle<()>>,
}

impl Proxy {
    /// Starts listeners for new Service ports and stops those of gone ones.
    fn sync(&mut self, wanted: &[ServicePort]) {
        let gone: Vec<ServicePort> = self.listeners.keys().filter(|p| !wanted.contains(p)).cloned().collect();
        for port in gone {
            if let Some(listener) = self.listeners.remove(&port) {
                listener.abort();
            }
            if !self.listeners.keys().any(|p| p.cluster_ip == port.cluster_ip) {
                crate::network::unplumb(port.cluster_ip);
            }
            tracing::info!(service = %format!("{}/{}", port.namespace, port.name), port = port.port, "stopped proxying");
        }
        for port in wanted {
            if self.listeners.contains_key(port) {
                continue;
            }
            let task = tokio::spawn(serve(port.clone(), self.endpoints.clone()));
            self.listeners.insert(port.clone(), task);
        }
    }
}

/// Listens at the Service's ClusterIP:port and forwards each connection.
async fn serve(port: ServicePort, endpoints: Store<Endpoints>) {
    let service = format!("{}/{}", port.namespace, port.name);
    if let Err(err) = crate::network::plumb(port.cluster_ip) {
        tracing::warn!(%service, error = %err, "cannot add the ClusterIP to lo; not proxied");
        return;
    }
    let listener = match tokio::net::TcpListener::bind((port.cluster_ip, port.port)).await {
        Ok(listener) => listener,
        Err(err) => {
            tracing::warn!(%service, port = port.port, error = %err, "cannot listen; not proxied");
            return;
        }
    };
    tracing::info!(%service, address = %format!("{}:{}", port.cluster_ip, port.port), "proxying");
    let next = Arc::new(AtomicUsize::new(0));
    let key = ObjectRef::new(&port.name).within(&port.namespace);
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else { continue };
        let backends = endpoints.get(&key).map(|e| ready_backends(&e, &port.port_name)).unwrap_or_default();
        if backends.is_empty() {
            tracing::debug!(%service, "no ready endpoint; connection closed");
            continue;
        }
        let backend = backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()];
        tokio::spawn(async move {
            let connect = tokio::net::TcpStream::connect(backend);
            match tokio::time::timeout(Duration::from_secs(5), connect).await {
                Ok(Ok(mut outbound)) => {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                _ => tracing::debug!(%backend, "backend unreachable; connection closed"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(ns: &str, name: &str, ip: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name},
            "spec": {"clusterIP": ip, "ports": ports},
        }))
        .unwrap()
    }

    #[test]
    fn tcp_ports_of_services_with_a_cluster_ip_are_proxied() {
        let web = service(
            "a",
            "web",
            "10.96.0.7",
            json!([{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]),
        );
        let ports = service_ports(&web);
        assert_eq!(ports.len(), 1);
        assert_eq!(
            (ports[0].cluster_ip, ports[0].port, ports[0].port_name.as_str()),
            ([10, 96, 0, 7].into(), 80, "http")
        );
        assert!(service_ports(&service("a", "headless", "None", json!([{"port": 80}]))).is_empty());
    }

    #[test]
    fn only_ready_addresses_of_the_matching_port_are_backends() {
        let endpoints: Endpoints = serde_json::from_value(json!({
            "metadata": {"namespace": "a", "name": "web"},
            "subsets": [
                {"addresses": [{"ip": "10.244.0.2"}, {"ip": "10.244.0.3"}],
                 "notReadyAddresses": [{"ip": "10.244.0.4"}],
                 "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]},
                {"addresses": [{"ip": "10.244.0.5"}], "ports": [{"name": "metrics", "port": 9090}]},
            ],
        }))
        .unwrap();
        let http: Vec<String> = ready_backends(&endpoints, "http").iter().map(|a| a.to_string()).collect();
        assert_eq!(http, ["10.244.0.2:8080", "10.244.0.3:8080"]);
        assert_eq!(ready_backends(&endpoints, "metrics").len(), 3);
        assert!(ready_backends(&endpoints, "other").is_empty());
    }

    #[test]
    fn hosts_name_services_as_cluster_dns_would() {
        let services = [
            service("a", "web", "10.96.0.7", json!([{"port": 80}])),
            service("b", "db", "10.96.0.8", json!([{"port": 5432}])),
            service("a", "headless", "None", json!([{"port": 80}])),
        ];
        let hosts = render_hosts(&services, "a", "pod-1", [10, 244, 0, 9].into());
        assert!(hosts.starts_with("127.0.0.1\tlocalhost\n"), "{hosts}");
        assert!(hosts.contains("10.244.0.9\tpod-1\n"), "{hosts}");
        assert!(hosts.contains("10.96.0.7\tweb.a.svc.cluster.local web.a.svc web.a web\n"), "{hosts}");
        assert!(
            hosts.contains("10.96.0.8\tdb.b.svc.cluster.local db.b.svc db.b\n"),
            "only its own namespace's short names"
        );
        assert!(!hosts.contains("headless"), "{hosts}");
    }
}
