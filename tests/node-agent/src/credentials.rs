//! What a kubelet gives an in-cluster Pod: `KUBERNETES_SERVICE_HOST/PORT`
//! and, unless `automountServiceAccountToken` is false, a token of the Pod's
//! ServiceAccount (from the TokenRequest API, bound to the Pod), the API
//! server's CA and the namespace under
//! `/var/run/secrets/kubernetes.io/serviceaccount`. Each component then talks
//! to the API server as its own ServiceAccount, so a missing RBAC rule fails
//! here as it would on any cluster.

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};

/// Where containers find their credentials.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The API server as Pods reach it.
#[derive(Clone, Debug)]
pub struct ApiServer {
    pub host: String,
    pub port: u16,
    pub ca_file: PathBuf,
}

impl ApiServer {
    /// From `https://HOST:PORT` and the CA file that signs its certificate.
    pub fn new(url: &str, ca_file: PathBuf) -> Result<Self, String> {
        let rest = url.strip_prefix("https://").ok_or("the API server URL must be https://HOST:PORT")?;
        let (host, port) =
            rest.trim_end_matches('/').rsplit_once(':').ok_or("the API server URL needs a port")?;
        let port = port.parse().map_err(|_| format!("bad port in {url}"))?;
        Ok(Self { host: host.to_string(), port, ca_file })
    }

    /// The variables every container of an in-cluster Pod sees.
    pub fn service_env(&self) -> Vec<(String, String)> {
        let (host, port) = (&self.host, self.port);
        vec![
            ("KUBERNETES_SERVICE_HOST".into(), host.clone()),
            ("KUBERNETES_SERVICE_PORT".into(), port.to_string()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string()),
            ("KUBERNETES_PORT".into(), format!("tcp://{host}:{port}")),
        ]
    }
}

/// Whether the Pod wants its ServiceAccount's credentials mounted.
pub fn wants_token(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.automount_service_account_token) != Some(false)
}

/// A token of the Pod's ServiceAccount, bound to the Pod, for `audiences`
/// (empty: the API server's own), as the kubelet requests it.
pub async fn pod_token(
    client: &kube::Client,
    pod: &Pod,
    audiences: Vec<String>,
    expiration_seconds: i64,
) -> Result<String, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let account =
        pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences,
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    let issued: TokenRequest = accounts
        .create_subresource("token", &account, &PostParams::default(), &request)
        .await
        .map_err(|err| format!("requesting a token for serviceaccount {namespace}/{account}: {err}"))?;
    Ok(issued.status.map(|s| s.token).unwrap_or_default())
}

/// Requests a token for the Pod's ServiceAccount and writes token, ca.crt and
/// namespace into `dir/serviceaccount`, readable by any user; returns that dir.
pub async fn write_service_account(
    client: &kube::Client,
    pod: &Pod,
    api_server: &ApiServer,
    dir: &Path,
) -> Result<PathBuf, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let token = pod_token(client, pod, Vec::new(), 24 * 3600).await?;
    let target = dir.join("serviceaccount");
    let write = |name: &str, bytes: &[u8]| -> Result<(), String> {
        let path = target.join(name);
        std::fs::write(&path, bytes).map_err(|err| format!("writing {}: {err}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
            .map_err(|err| format!("chmod {}: {err}", path.display()))
    };
    std::fs::create_dir_all(&target).map_err(|err| format!("creating {}: {err}", target.display()))?;
    let ca = std::fs::read(&api_server.ca_file)
        .map_err(|err| format!("reading {}: {err}", api_server.ca_file.display()))?;
    write("token", token.as_bytes())?;
    write("ca.crt", &ca)?;
    write("namespace", namespace.as_bytes())?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_environment_points_at_the_api_server() {
        let api = ApiServer::new("https://127.0.0.1:16443/", "/ca".into()).unwrap();
        let env: std::collections::BTreeMap<_, _> = api.service_env().into_iter().collect();
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "127.0.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "16443");
        assert!(ApiServer::new("http://127.0.0.1:1", "/ca".into()).is_err());
        assert!(ApiServer::new("https://127.0.0.1", "/ca".into()).is_err());
    }

    #[test]
    fn only_an_explicit_false_turns_the_token_off() {
        let mut pod = Pod { spec: Some(Default::default()), ..Default::default() };
        assert!(wants_token(&pod));
        pod.spec.as_mut().unwrap().automount_service_account_token = Some(false);
        assert!(!wants_token(&pod));
    }
}
