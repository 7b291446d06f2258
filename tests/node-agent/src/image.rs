//! Container images from the host's podman store, as a kubelet's container
//! runtime finds them: the Pod's image reference is normalized the way
//! Docker and containerd normalize it (`mining-operator/miner:dev` is
//! `docker.io/mining-operator/miner:dev`), inspected for its config
//! (entrypoint, cmd, env, user, working dir), and its root filesystem is
//! copied out of the store once per image id. Pulls into the store are
//! `crate::pull`'s.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::Value;

/// Why an image cannot be used; becomes the container's waiting reason.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image {reference:?} is not present on this node")]
    NotPresent { reference: String },
    #[error("inspecting image {reference:?}: {message}")]
    Inspect { reference: String, message: String },
}

impl ImageError {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotPresent { .. } => "ErrImageNeverPull",
            Self::Inspect { .. } => "ImageInspectError",
        }
    }
}

/// What the image's config says about running it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageConfig {
    pub id: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    pub user: String,
    pub working_dir: String,
}

/// An image ready to run: its config and a read-only copy of its root filesystem.
#[derive(Debug)]
pub struct Image {
    pub reference: String,
    pub config: ImageConfig,
    pub rootfs: PathBuf,
}

/// Docker's normalization of an image reference: a first path component that
/// is not a registry (no `.` or `:`, not `localhost`) means Docker Hub, a
/// single name is an official image, and no tag or digest means `latest`.
pub fn reference(image: &str) -> String {
    let (name, suffix) = match image.find('@') {
        Some(at) => (&image[..at], &image[at..]),
        None => match image.rfind(':') {
            Some(colon) if !image[colon..].contains('/') => (&image[..colon], &image[colon..]),
            _ => (image, ":latest"),
        },
    };
    let first = name.split('/').next().unwrap_or_default();
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let name = if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    format!("{name}{suffix}")
}

/// The config of one `podman image inspect` entry.
pub fn parse_config(inspect: &Value) -> ImageConfig {
    let config = &inspect["Config"];
    let strings = |value: &Value| -> Vec<String> {
        value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect()
    };
    ImageConfig {
        id: inspect["Id"].as_str().unwrap_or_default().to_string(),
        entrypoint: strings(&config["Entrypoint"]),
        cmd: strings(&config["Cmd"]),
        env: strings(&config["Env"])
            .into_iter()
            .map(|pair| match pair.split_once('=') {
                Some((name, value)) => (name.to_string(), value.to_string()),
                None => (pair, String::new()),
            })
            .collect(),
        user: config["User"].as_str().unwrap_or_default().to_string(),
        working_dir: config["WorkingDir"].as_str().unwrap_or_default().to_string(),
    }
}

/// The process's argv, as the kubelet builds it: `command` replaces the
/// entrypoint (and then the image's cmd is dropped), `args` replace the cmd.
pub fn argv(container: &Container, config: &ImageConfig) -> Vec<String> {
    match (&container.command, &container.args) {
        (Some(command), args) if !command.is_empty() => {
            command.iter().chain(args.iter().flatten()).cloned().collect()
        }
        (_, Some(args)) => config.entrypoint.iter().chain(args).cloned().collect(),
        (_, None) => config.entrypoint.iter().chain(&config.cmd).cloned().collect(),
    }
}

/// Why the container's user cannot be settled.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum UserError {
    #[error("container has runAsNonRoot and image will run as root")]
    RunsAsRoot,
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({0}), cannot verify user is non-root"
    )]
    NonNumeric(String),
}

/// (uid, gid): the container's or the Pod's runAsUser/runAsGroup, else the
/// image's `USER uid[:gid]`; runAsNonRoot is enforced as the kubelet does.
pub fn user(pod: &Pod, container: &Container, config: &ImageConfig) -> Result<(u32, u32), UserError> {
    let pod_ctx = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let ctx = container.security_context.as_ref();
    let run_as_user = ctx.and_then(|c| c.run_as_user).or(pod_ctx.and_then(|c| c.run_as_user));
    let run_as_group = ctx.and_then(|c| c.run_as_group).or(pod_ctx.and_then(|c| c.run_as_group));
    let non_root =
        ctx.and_then(|c| c.run_as_non_root).or(pod_ctx.and_then(|c| c.run_as_non_root)) == Some(true);
    let (image_user, image_group) = match config.user.split_once(':') {
        Some((user, group)) => (user, Some(group)),
        None => (config.user.as_str(), None),
    };
    let uid = match run_as_user {
        Some(uid) => u32::try_from(uid).unwrap_or(0),
        None if image_user.is_empty() => 0,
        None => match image_user.parse() {
            Ok(uid) => uid,
            // Names need the image's /etc/passwd; our images are numeric.
            Err(_) if non_root => return Err(UserError::NonNumeric(config.user.clone())),
            Err(_) => 0,
        },
    };
    if non_root && uid == 0 {
        return Err(UserError::RunsAsRoot);
    }
    let gid = match run_as_group {
        Some(gid) => u32::try_from(gid).unwrap_or(0),
        None => image_group.and_then(|g| g.parse().ok()).unwrap_or(0),
    };
    Ok((uid, gid))
}

/// The images on this host, read from podman's store.
pub struct ImageStore {
    podman: String,
    /// Root filesystems by image id, copied out of the store.
    dir: PathBuf,
    copied: tokio::sync::Mutex<HashMap<String, PathBuf>>,
}

impl ImageStore {
    pub fn new(podman: String, dir: PathBuf) -> Arc<Self> {
        Arc::new(Self { podman, dir, copied: Default::default() })
    }

    /// The image a container names, with its root filesystem ready.
    pub async fn resolve(&self, image: &str) -> Result<Arc<Image>, ImageError> {
        let reference = reference(image);
        let inspect = self.podman(&["image", "inspect", "--format", "json", &reference]).await;
        let inspect = match inspect {
            Ok(out) => out,
            Err(message) if message.contains("image not known") || message.contains("no such image") => {
                return Err(ImageError::NotPresent { reference });
            }
            Err(message) => return Err(ImageError::Inspect { reference, message }),
        };
        let parsed: Value = serde_json::from_str(&inspect)
            .map_err(|err| ImageError::Inspect { reference: reference.clone(), message: err.to_string() })?;
        let config = parse_config(&parsed[0]);
        if config.id.is_empty() || config.id.contains(['/', '.']) {
            let message = format!("unexpected image id {:?}", config.id);
            return Err(ImageError::Inspect { reference, message });
        }
        let rootfs = self
            .rootfs(&config.id)
            .await
            .map_err(|message| ImageError::Inspect { reference: reference.clone(), message })?;
        Ok(Arc::new(Image { reference, config, rootfs }))
    }

    /// The image's root filesystem, copied out of podman's store the first time.
    async fn rootfs(&self, id: &str) -> Result<PathBuf, String> {
        let mut copied = self.copied.lock().await;
        if let Some(path) = copied.get(id) {
            return Ok(path.clone());
        }
        let target = self.dir.join(id);
        if !target.is_dir() {
            let mounted = self.podman(&["image", "mount", id]).await?;
            let partial = self.dir.join(format!("{id}.partial"));
            let _ = std::fs::remove_dir_all(&partial);
            let source = PathBuf::from(mounted.trim());
            let into = partial.clone();
            let copy = tokio::task::spawn_blocking(move || copy_tree(&source, &into, false))
                .await
                .map_err(|err| err.to_string())
                .and_then(|copied| copied);
            let _ = self.podman(&["image", "unmount", id]).await;
            copy?;
            std::fs::rename(&partial, &target)
                .map_err(|err| format!("renaming {}: {err}", partial.display()))?;
            tracing::info!(image = id, rootfs = %target.display(), "image root filesystem copied out of the store");
        }
        copied.insert(id.to_string(), target.clone());
        Ok(target)
    }

    async fn podman(&self, args: &[&str]) -> Result<String, String> {
        let output = tokio::process::Command::new(&self.podman)
            .args(args)
            .output()
            .await
            .map_err(|err| format!("running {}: {err}", self.podman))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
        }
    }
}

/// `cp -a` of a tree; with `hard_links`, files are linked, not copied (for a
/// root that is mounted read-only, so no container can change the original).
pub fn copy_tree(source: &Path, target: &Path, hard_links: bool) -> Result<(), String> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|err| format!("creating {}: {err}", parent.display()))?;
    }
    let output = std::process::Command::new("cp")
        .arg(if hard_links { "-al" } else { "-a" })
        .arg(source)
        .arg(target)
        .output()
        .map_err(|err| format!("running cp: {err}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(format!("copying {} to {}: {}", source.display(), target.display(), stderr.trim()))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, SecurityContext};

    use super::*;

    #[test]
    fn references_normalize_as_docker_and_containerd_do() {
        assert_eq!(reference("mining-operator/miner:dev"), "docker.io/mining-operator/miner:dev");
        assert_eq!(reference("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(reference("localhost/x/y"), "localhost/x/y:latest");
        assert_eq!(reference("reg:5000/a/b:1"), "reg:5000/a/b:1");
        assert_eq!(reference("ghcr.io/a/b@sha256:ab"), "ghcr.io/a/b@sha256:ab");
        assert_eq!(reference("docker.io/mining-operator/miner:dev"), "docker.io/mining-operator/miner:dev");
    }

    fn config() -> ImageConfig {
        ImageConfig {
            entrypoint: vec!["/miner".into()],
            cmd: vec!["--help".into()],
            user: "65532:65532".into(),
            ..Default::default()
        }
    }

    #[test]
    fn command_replaces_the_entrypoint_and_drops_cmd_and_args_replace_cmd() {
        let mut container = Container::default();
        assert_eq!(argv(&container, &config()), ["/miner", "--help"]);
        container.args = Some(vec!["mine".into()]);
        assert_eq!(argv(&container, &config()), ["/miner", "mine"]);
        container.command = Some(vec!["/bin/other".into()]);
        assert_eq!(argv(&container, &config()), ["/bin/other", "mine"]);
        container.args = None;
        assert_eq!(argv(&container, &config()), ["/bin/other"]);
    }

    fn pod(run_as_user: Option<i64>, non_root: Option<bool>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                security_context: Some(PodSecurityContext {
                    run_as_user,
                    run_as_non_root: non_root,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_user_comes_from_the_pod_else_the_image_and_non_root_is_enforced() {
        let container = Container::default();
        assert_eq!(user(&pod(None, Some(true)), &container, &config()), Ok((65532, 65532)));
        assert_eq!(user(&pod(Some(1000), Some(true)), &container, &config()), Ok((1000, 65532)));
        let root_image = ImageConfig { user: String::new(), ..config() };
        assert_eq!(user(&pod(None, Some(true)), &container, &root_image), Err(UserError::RunsAsRoot));
        assert_eq!(user(&pod(None, None), &container, &root_image), Ok((0, 0)));
        let named = ImageConfig { user: "nobody".into(), ..config() };
        assert!(matches!(user(&pod(None, Some(true)), &container, &named), Err(UserError::NonNumeric(_))));
        let container = Container {
            security_context: Some(SecurityContext { run_as_user: Some(0), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(user(&pod(None, Some(true)), &container, &config()), Err(UserError::RunsAsRoot));
    }

    #[test]
    fn the_inspect_output_gives_the_config() {
        let inspect = serde_json::json!({"Id": "abc", "Config": {
            "User": "65532:65532", "Env": ["PATH=/bin", "EMPTY"], "Entrypoint": ["/miner"], "WorkingDir": "/w",
        }});
        let config = parse_config(&inspect);
        assert_eq!(config.id, "abc");
        assert_eq!(config.entrypoint, ["/miner"]);
        assert!(config.cmd.is_empty());
        assert_eq!(config.env, [("PATH".to_string(), "/bin".to_string()), ("EMPTY".into(), String::new())]);
        assert_eq!(config.working_dir, "/w");
    }
}
