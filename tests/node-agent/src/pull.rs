//! What a kubelet's image pull reports, for the cases the agent can tell
//! without a registry: an image reference that does not parse
//! (`InvalidImageName`), an image of a private registry without the Pod's
//! credentials for it, and an image nowhere to be had (`ErrImagePull`, then
//! `ImagePullBackOff`; `ErrImageNeverPull` under `imagePullPolicy: Never`).
//!
//! A private registry is named with `--registry-credentials
//! HOST=USER:PASSWORD`: an image of HOST is "pulled" (then found in the
//! store or among the test doubles as any other) only when one of the
//! Pod's `imagePullSecrets` is a `kubernetes.io/dockerconfigjson` Secret
//! whose `auths[HOST]` holds those credentials, as a registry would check.
//! The registry serves what the host built (podman's `localhost/…` images,
//! or the test doubles) under the same path: `HOST/mining-operator/miner:dev`
//! is `localhost/mining-operator/miner:dev`.

use base64::Engine as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;

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

/// Whether one of `pod`'s `imagePullSecrets` holds `credentials`
/// (`USER:PASSWORD`) for `host`.
pub async fn has_credentials(client: &kube::Client, pod: &Pod, host: &str, credentials: &str) -> bool {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let names = pod.spec.iter().flat_map(|s| s.image_pull_secrets.iter().flatten()).map(|r| r.name.clone());
    for name in names {
        let Ok(Some(secret)) = secrets.get_opt(&name).await else { continue };
        if secret.type_.as_deref() != Some("kubernetes.io/dockerconfigjson") {
            continue;
        }
        let config = secret.data.unwrap_or_default().remove(".dockerconfigjson");
        if config.is_some_and(|config| config_holds(&config.0, host, credentials)) {
            return true;
        }
    }
    false
}

/// Whether a `.dockerconfigjson` document holds `credentials` for `host`.
pub fn config_holds(config: &[u8], host: &str, credentials: &str) -> bool {
    let Ok(config) = serde_json::from_slice::<serde_json::Value>(config) else { return false };
    let Some(entry) = config["auths"].get(host) else { return false };
    let from_auth = entry["auth"]
        .as_str()
        .and_then(|auth| base64::engine::general_purpose::STANDARD.decode(auth).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok());
    let from_fields = match (entry["username"].as_str(), entry["password"].as_str()) {
        (Some(user), Some(password)) => Some(format!("{user}:{password}")),
        _ => None,
    };
    [from_auth, from_fields].into_iter().flatten().any(|held| held == credentials)
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
    }

    #[test]
    fn only_the_hosts_own_credentials_open_it() {
        let auth = base64::engine::general_purpose::STANDARD.encode("puller:s3cret");
        let config = format!(r#"{{"auths": {{"registry.test:5000": {{"auth": "{auth}"}}}}}}"#);
        assert!(config_holds(config.as_bytes(), "registry.test:5000", "puller:s3cret"));
        assert!(!config_holds(config.as_bytes(), "registry.test:5000", "puller:other"));
        assert!(!config_holds(config.as_bytes(), "other.test", "puller:s3cret"));
        let fields = r#"{"auths": {"h.test": {"username": "u", "password": "p"}}}"#;
        assert!(config_holds(fields.as_bytes(), "h.test", "u:p"));
        assert_eq!(registry_of("registry.test:5000/a/b"), Some("registry.test:5000"));
        assert_eq!(registry_of("mining-operator/miner"), None);
    }
}
