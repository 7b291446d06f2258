//! Pod volumes the agent can provide: `secret`, `configMap` and `emptyDir`,
//! each a directory under the Pod's state dir, bind-mounted at every
//! container's `volumeMounts[].mountPath` (in its private mount namespace).
//! Files are written once, when the Pod starts (the kubelet would refresh
//! them); `subPath` and read-only mounts are not supported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, Pod, Secret, Volume};
use kube::api::Api;

/// What containers' environments are made of besides literal values:
/// (source, key) → value, the source being [`secret_source`] or
/// [`config_map_source`] of a name.
pub type EnvSources = BTreeMap<(String, String), String>;

pub fn secret_source(name: &str) -> String {
    format!("secret/{name}")
}

pub fn config_map_source(name: &str) -> String {
    format!("configmap/{name}")
}

/// The values every `env[].valueFrom.secretKeyRef` and every
/// `envFrom[]` (`secretRef`, `configMapRef`) of `pod`'s containers
/// refer to, read once when the Pod starts as the kubelet reads them. A
/// missing Secret, ConfigMap or key fails the Pod unless the reference is
/// optional.
pub async fn env_sources(client: &kube::Client, pod: &Pod) -> Result<EnvSources, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let mut values = BTreeMap::new();
    let containers: Vec<&Container> = pod.spec.iter().flat_map(|s| s.containers.iter()).collect();
    let secret_data = |name: String| {
        let secrets = secrets.clone();
        async move {
            let secret = secrets
                .get_opt(&name)
                .await
                .map_err(|err| format!("reading secret {namespace}/{name}: {err}"))?;
            Ok::<_, String>(secret.map(|secret| {
                secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|(key, bytes)| Some((key, String::from_utf8(bytes.0).ok()?)))
                    .collect::<BTreeMap<String, String>>()
            }))
        }
    };
    for reference in containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .filter_map(|v| v.value_from.as_ref()?.secret_key_ref.as_ref())
    {
        let name = reference.name.clone();
        let value = secret_data(name.clone()).await?.and_then(|data| data.get(&reference.key).cloned());
        match value {
            Some(value) => {
                values.insert((secret_source(&name), reference.key.clone()), value);
            }
            None if reference.optional == Some(true) => {}
            None => return Err(format!("secret {namespace}/{name} has no key {:?}", reference.key)),
        }
    }
    for from in containers.iter().flat_map(|c| c.env_from.iter().flatten()) {
        if let Some(reference) = &from.secret_ref {
            match secret_data(reference.name.clone()).await? {
                Some(data) => {
                    values.extend(data.into_iter().map(|(k, v)| ((secret_source(&reference.name), k), v)))
                }
                None if reference.optional == Some(true) => {}
                None => return Err(format!("secret {namespace}/{} not found (envFrom)", reference.name)),
            }
        }
        if let Some(reference) = &from.config_map_ref {
            let found = config_maps
                .get_opt(&reference.name)
                .await
                .map_err(|err| format!("reading configmap {namespace}/{}: {err}", reference.name))?;
            match found {
                Some(map) => values.extend(
                    map.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| ((config_map_source(&reference.name), k), v)),
                ),
                None if reference.optional == Some(true) => {}
                None => return Err(format!("configmap {namespace}/{} not found (envFrom)", reference.name)),
            }
        }
    }
    Ok(values)
}

/// Every supported volume of `pod`, prepared under `pod_dir/volumes`: name → host dir.
pub async fn prepare(
    client: &kube::Client,
    pod: &Pod,
    pod_dir: &Path,
) -> Result<BTreeMap<String, PathBuf>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut prepared = BTreeMap::new();
    for volume in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        let dir = pod_dir.join("volumes").join(&volume.name);
        let Some(files) = contents(client, pod, namespace, volume).await? else {
            tracing::warn!(volume = %volume.name, "unsupported volume type; not mounted");
            continue;
        };
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|err| format!("creating {}: {err}", dir.display()))?;
        // emptyDir is writable by whatever user the container runs as.
        let dir_mode = if volume.empty_dir.is_some() { 0o1777 } else { 0o755 };
        set_mode(&dir, dir_mode)?;
        for (relative, (bytes, mode)) in files {
            let path = dir.join(&relative);
            if !path.starts_with(&dir) || relative.split('/').any(|part| part == "..") {
                return Err(format!("volume {}: path {relative:?} leaves the volume", volume.name));
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|err| format!("creating {}: {err}", parent.display()))?;
            }
            std::fs::write(&path, bytes).map_err(|err| format!("writing {}: {err}", path.display()))?;
            set_mode(&path, mode)?;
        }
        prepared.insert(volume.name.clone(), dir);
    }
    Ok(prepared)
}

/// The files of one volume (relative path → bytes and mode), `None` for a
/// type the agent does not provide.
async fn contents(
    client: &kube::Client,
    pod: &Pod,
    namespace: &str,
    volume: &Volume,
) -> Result<Option<BTreeMap<String, (Vec<u8>, u32)>>, String> {
    if volume.empty_dir.is_some() {
        return Ok(Some(BTreeMap::new()));
    }
    // Projected ServiceAccount tokens (e.g. one minted for another audience
    // than the API server's); other projected sources are not provided.
    if let Some(projected) = &volume.projected {
        let mut files = BTreeMap::new();
        let mode = projected.default_mode.map_or(0o644, |m| (m & 0o777) as u32);
        for source in projected.sources.iter().flatten() {
            let Some(token) = &source.service_account_token else {
                return Ok(None);
            };
            let audiences = token.audience.clone().into_iter().collect();
            let issued = crate::credentials::pod_token(
                client,
                pod,
                audiences,
                token.expiration_seconds.unwrap_or(3600),
            )
            .await?;
            files.insert(token.path.clone(), (issued.into_bytes(), mode));
        }
        return Ok(Some(files));
    }
    if let Some(source) = &volume.secret {
        let name = source.secret_name.clone().unwrap_or_default();
        let secret = Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(&name)
            .await
            .map_err(|err| format!("reading secret {namespace}/{name}: {err}"))?;
        let data: BTreeMap<String, Vec<u8>> = match secret {
            Some(secret) => {
                let mut data: BTreeMap<String, Vec<u8>> =
                    secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
                for (key, value) in secret.string_data.unwrap_or_default() {
                    data.insert(key, value.into_bytes());
                }
                data
            }
            None if source.optional == Some(true) => BTreeMap::new(),
            None => return Err(format!("secret {namespace}/{name} not found")),
        };
        return project(data, source.items.as_deref(), source.default_mode).map(Some);
    }
    if let Some(source) = &volume.config_map {
        let name = source.name.clone();
        let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(&name)
            .await
            .map_err(|err| format!("reading configmap {namespace}/{name}: {err}"))?;
        let data: BTreeMap<String, Vec<u8>> = match map {
            Some(map) => {
                let mut data: BTreeMap<String, Vec<u8>> =
                    map.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
                for (key, value) in map.binary_data.unwrap_or_default() {
                    data.insert(key, value.0);
                }
                data
            }
            None if source.optional == Some(true) => BTreeMap::new(),
            None => return Err(format!("configmap {namespace}/{name} not found")),
        };
        return project(data, source.items.as_deref(), source.default_mode).map(Some);
    }
    Ok(None)
}

/// The kubelet's projection: every key as a file, or only `items` (key →
/// path, an item's own mode); a listed key that is missing is an error.
pub fn project(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let mode_of = |mode: Option<i32>| mode.or(default_mode).map_or(0o644, |m| (m & 0o777) as u32);
    match items {
        None => Ok(data.into_iter().map(|(key, bytes)| (key, (bytes, mode_of(None)))).collect()),
        Some(items) => items
            .iter()
            .map(|item| {
                let bytes = data.get(&item.key).ok_or_else(|| format!("key {:?} not found", item.key))?;
                Ok((item.path.clone(), (bytes.clone(), mode_of(item.mode))))
            })
            .collect(),
    }
}

/// (host dir, mount path) for each of `container`'s mounts of a prepared volume.
pub fn mounts_of(container: &Container, prepared: &BTreeMap<String, PathBuf>) -> Vec<(PathBuf, PathBuf)> {
    (container.volume_mounts.iter().flatten())
        .filter_map(|mount| Some((prepared.get(&mount.name)?.clone(), PathBuf::from(&mount.mount_path))))
        .collect()
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|err| format!("chmod {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> BTreeMap<String, Vec<u8>> {
        [("tokens".to_string(), b"s alice".to_vec()), ("other".to_string(), b"x".to_vec())].into()
    }

    #[test]
    fn every_key_is_a_file_unless_items_pick_some() {
        let all = project(data(), None, None).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all["tokens"], (b"s alice".to_vec(), 0o644));
        let items = [KeyToPath { key: "tokens".into(), path: "auth/tokens".into(), mode: Some(0o400) }];
        let picked = project(data(), Some(&items), Some(0o440)).unwrap();
        assert_eq!(picked.keys().collect::<Vec<_>>(), ["auth/tokens"]);
        assert_eq!(picked["auth/tokens"].1, 0o400);
        let missing = [KeyToPath { key: "nope".into(), path: "p".into(), mode: None }];
        assert!(project(data(), Some(&missing), None).unwrap_err().contains("nope"));
        assert_eq!(project(data(), None, Some(0o4755)).unwrap()["other"].1, 0o755, "only permission bits");
    }
}
