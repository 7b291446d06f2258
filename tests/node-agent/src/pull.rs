//! Image pulls as a kubelet makes them: from a real registry, with the
//! credentials of the Pod's `imagePullSecrets`, one pull at a time (the
//! kubelet's default `serializeImagePulls`), into podman's store.
//!
//! The node reaches only the registries it is configured for: containerd's
//! `certs.d` layout, a directory per `HOST[:PORT]` under `--registry-certs`
//! holding the CA it trusts for that host (`ca.crt`). This machine has no
//! internet, so an image of any other registry is never pulled: it runs
//! when the store holds it (as on a node whose images were preloaded, like
//! `kind load`) and is otherwise `ErrImagePull`, then `ImagePullBackOff`.
//!
//! What a kubelet reports for an image it cannot have is chosen in
//! `runner/images.rs`; this module parses references, reads the Pod's pull
//! secrets and runs the pull.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;

/// The longest one pull may take before it counts as failed.
const PULL_TIMEOUT: Duration = Duration::from_secs(120);

/// Whether `image` parses as a Docker/OCI reference: `[host[:port]/]path[:tag][@digest]`,
/// path components lowercase alphanumerics joined by `.`, `_`, `__` or dashes.
pub fn valid_reference(image: &str) -> bool {
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let Some((algorithm, hex)) = digest.split_once(':') else { return false };
        if algorithm.is_empty() || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return false;
        }
    }
    let (name, tag) = match rest.rfind(':') {
        Some(colon) if !rest[colon..].contains('/') => (&rest[..colon], Some(&rest[colon + 1..])),
        _ => (rest, None),
    };
    if let Some(tag) = tag {
        let mut chars = tag.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok || tag.len() > 128 || !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
            return false;
        }
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 1 && registry_of(name).is_some() {
        let host = parts.remove(0);
        if host.is_empty() || !host.chars().all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c)) {
            return false;
        }
    }
    !parts.is_empty() && parts.iter().all(|part| valid_component(part))
}

fn valid_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    bytes.iter().all(|&b| alnum(b) || b == b'.' || b == b'_' || b == b'-')
        && !part.contains("..")
        && !part.contains("___")
}

/// The registry host an image names, if it names one (Docker's rule: a
/// first component with `.` or `:`, or `localhost`).
pub fn registry_of(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    (first.contains('.') || first.contains(':') || first == "localhost").then_some(first)
}

/// The policy a container's image is pulled under: its own, else the API
/// server's default (`Always` for `:latest` or no tag, else `IfNotPresent`).
pub fn policy(container: &k8s_openapi::api::core::v1::Container) -> &str {
    if let Some(policy) = container.image_pull_policy.as_deref() {
        return policy;
    }
    let image = container.image.as_deref().unwrap_or_default();
    let tag = image.rsplit_once(':').map(|(_, tag)| tag).filter(|tag| !tag.contains('/'));
    if image.contains('@') || tag.is_some_and(|tag| tag != "latest") { "IfNotPresent" } else { "Always" }
}

/// Pulls into podman's store from the registries this node reaches.
pub struct Puller {
    podman: String,
    certs: Option<PathBuf>,
    /// Auth files live here for the length of one pull.
    scratch: PathBuf,
    /// One pull at a time, as a kubelet pulls by default.
    serial: tokio::sync::Mutex<()>,
}

impl Puller {
    pub fn new(podman: String, certs: Option<PathBuf>, scratch: PathBuf) -> Self {
        Self { podman, certs, scratch, serial: tokio::sync::Mutex::new(()) }
    }

    /// The agent's, as its flags say (auth files under its state directory).
    pub fn of(config: &crate::Config) -> std::sync::Arc<Self> {
        let scratch = config.state_dir.join("pull");
        std::sync::Arc::new(Self::new(config.podman.clone(), config.registry_certs.clone(), scratch))
    }

    /// The `certs.d` directory of `host`, when this node reaches it.
    pub fn reaches(&self, host: &str) -> Option<PathBuf> {
        let safe = !host.is_empty() && !host.contains(['/', '\\']) && host != "." && host != "..";
        let dir = self.certs.as_ref()?.join(host);
        (safe && dir.is_dir()).then_some(dir)
    }

    /// Pulls `image` from `host`, trying each of `credentials` (`USER:PASSWORD`)
    /// in turn as a kubelet tries a Pod's pull secrets, anonymously when
    /// there are none; the registry's last refusal when every try failed.
    pub async fn pull(&self, image: &str, host: &str, credentials: &[String]) -> Result<(), String> {
        let certs = self.reaches(host).ok_or_else(|| format!("this node does not reach registry {host}"))?;
        let _one_at_a_time = self.serial.lock().await;
        let mut last = String::new();
        let anonymous = [None];
        let tries: Vec<Option<&str>> = if credentials.is_empty() {
            anonymous.to_vec()
        } else {
            credentials.iter().map(|c| Some(c.as_str())).collect()
        };
        for credential in tries {
            match self.pull_once(image, host, &certs, credential).await {
                Ok(()) => return Ok(()),
                Err(refusal) => last = refusal,
            }
        }
        Err(last)
    }

    async fn pull_once(
        &self,
        image: &str,
        host: &str,
        certs: &Path,
        credential: Option<&str>,
    ) -> Result<(), String> {
        let mut command = tokio::process::Command::new(&self.podman);
        command.args(["pull", "--quiet", "--cert-dir"]).arg(certs).kill_on_drop(true);
        // The password goes in a file only root reads, never on a command
        // line; an anonymous pull gets an empty one, or podman would use
        // root's own logins.
        let auth_file = self.auth_file(host, credential)?;
        command.arg("--authfile").arg(auth_file.path());
        command.arg(format!("docker://{image}"));
        let output = tokio::time::timeout(PULL_TIMEOUT, command.output())
            .await
            .map_err(|_| format!("pulling {image:?} took over {}s", PULL_TIMEOUT.as_secs()))?
            .map_err(|err| format!("running {}: {err}", self.podman))?;
        if output.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&output.stderr);
        let last_line = said.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("the pull failed");
        Err(last_line.trim().trim_start_matches("Error: ").to_string())
    }

    fn auth_file(&self, host: &str, credential: Option<&str>) -> Result<AuthFile, String> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::create_dir_all(&self.scratch)
            .map_err(|err| format!("creating {}: {err}", self.scratch.display()))?;
        let body = match credential {
            Some(credential) => {
                let auth = base64::engine::general_purpose::STANDARD.encode(credential);
                serde_json::json!({"auths": {host: {"auth": auth}}})
            }
            None => serde_json::json!({"auths": {}}),
        }
        .to_string();
        let unique: u64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
        let path = self.scratch.join(format!("auth-{}-{unique}.json", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|err| format!("creating {}: {err}", path.display()))?;
        file.write_all(body.as_bytes()).map_err(|err| format!("writing {}: {err}", path.display()))?;
        Ok(AuthFile(path))
    }
}

/// An auth file removed when the pull is done.
struct AuthFile(PathBuf);

impl AuthFile {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for AuthFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The credentials (`USER:PASSWORD`) the Pod's `imagePullSecrets` hold for
/// `host`, in the Pod's order; Secrets that are missing or of another type
/// are skipped, as a kubelet skips them.
pub async fn pod_credentials(client: &kube::Client, pod: &Pod, host: &str) -> Vec<String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let names = pod.spec.iter().flat_map(|s| s.image_pull_secrets.iter().flatten()).map(|r| r.name.clone());
    let mut found = Vec::new();
    for name in names {
        let Ok(Some(secret)) = secrets.get_opt(&name).await else { continue };
        let mut data = secret.data.unwrap_or_default();
        let held = match secret.type_.as_deref() {
            Some("kubernetes.io/dockerconfigjson") => data.remove(".dockerconfigjson").map(|config| {
                let config = serde_json::from_slice::<serde_json::Value>(&config.0).unwrap_or_default();
                credentials_for(&config["auths"], host)
            }),
            Some("kubernetes.io/dockercfg") => data
                .remove(".dockercfg")
                .map(|config| credentials_for(&serde_json::from_slice(&config.0).unwrap_or_default(), host)),
            _ => None,
        };
        found.extend(held.into_iter().flatten());
    }
    found
}

/// The `USER:PASSWORD` pairs an `auths` map holds for `host` (keys may carry
/// a scheme or a path, as `docker login` writes them).
pub fn credentials_for(auths: &serde_json::Value, host: &str) -> Vec<String> {
    let Some(auths) = auths.as_object() else { return Vec::new() };
    let key_host = |key: &str| {
        let key = key.trim_start_matches("https://").trim_start_matches("http://");
        key.split('/').next().unwrap_or_default().to_string()
    };
    auths
        .iter()
        .filter(|(key, _)| key_host(key) == host)
        .filter_map(|(_, entry)| {
            let from_auth = entry["auth"]
                .as_str()
                .and_then(|auth| base64::engine::general_purpose::STANDARD.decode(auth).ok())
                .and_then(|bytes| String::from_utf8(bytes).ok());
            let from_fields = match (entry["username"].as_str(), entry["password"].as_str()) {
                (Some(user), Some(password)) => Some(format!("{user}:{password}")),
                _ => None,
            };
            from_auth.filter(|held| held.contains(':')).or(from_fields)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_as_a_container_runtime_parses_them() {
        for good in [
            "mining-operator/miner:dev",
            "busybox",
            "registry.example:5000/team/tool:v1.2_3",
            "localhost/x",
            "a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(valid_reference(good), "{good}");
        }
        for bad in
            ["", "Mining/Miner:dev", "a//b", "a/b:", "a/b:-x", "-a/b", "a b", "a/b@sha256:xyz", "a/b:t:u"]
        {
            assert!(!valid_reference(bad), "{bad}");
        }
        assert_eq!(registry_of("registry.test:5000/a/b"), Some("registry.test:5000"));
        assert_eq!(registry_of("mining-operator/miner"), None);
    }

    #[test]
    fn a_secret_holds_credentials_only_for_its_own_host() {
        let auth = base64::engine::general_purpose::STANDARD.encode("puller:s3cret");
        let auths = serde_json::json!({
            "https://registry.test:5000/v1/": {"auth": auth},
            "other.test": {"username": "u", "password": "p"},
        });
        assert_eq!(credentials_for(&auths, "registry.test:5000"), ["puller:s3cret"]);
        assert_eq!(credentials_for(&auths, "other.test"), ["u:p"]);
        assert!(credentials_for(&auths, "registry.test").is_empty());
        assert!(credentials_for(&serde_json::json!("not a map"), "other.test").is_empty());
    }

    #[test]
    fn the_default_policy_is_the_api_servers() {
        let container = |image: &str, policy: Option<&str>| k8s_openapi::api::core::v1::Container {
            image: Some(image.into()),
            image_pull_policy: policy.map(String::from),
            ..Default::default()
        };
        assert_eq!(policy(&container("r.test:5000/a/b", None)), "Always");
        assert_eq!(policy(&container("r.test:5000/a/b:latest", None)), "Always");
        assert_eq!(policy(&container("r.test:5000/a/b:1.0", None)), "IfNotPresent");
        assert_eq!(policy(&container("r.test:5000/a/b:1.0", Some("Never"))), "Never");
    }

    #[test]
    fn only_a_configured_host_is_reached() {
        let certs = std::env::temp_dir().join(format!("pull-certs-{}", std::process::id()));
        std::fs::create_dir_all(certs.join("registry.test:5000")).unwrap();
        let puller = Puller::new("podman".into(), Some(certs.clone()), certs.join("scratch"));
        assert!(puller.reaches("registry.test:5000").is_some());
        assert!(puller.reaches("other.test").is_none());
        assert!(puller.reaches("..").is_none());
        assert!(Puller::new("podman".into(), None, certs.clone()).reaches("registry.test:5000").is_none());
        std::fs::remove_dir_all(certs).unwrap();
    }
}
