//! One container as a local process.
//!
//! Each process gets its own process group (so deleting the Pod kills all it
//! started) and, when the agent is root, a private mount namespace in which a
//! per-container file is bind-mounted at `terminationMessagePath`, as the
//! kubelet does; what the process writes there becomes the termination message.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::net::Ipv4Addr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

/// The kubelet caps termination messages at 4096 bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// FallbackToLogsOnError uses the last 80 lines, at most 2048 bytes.
const FALLBACK_LINES: usize = 80;
const FALLBACK_BYTES: usize = 2048;

/// Why a container could not be started; becomes the waiting/terminated reason.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("container has runAsNonRoot but runAsUser 0")]
    RunsAsRoot,
    #[error("{message}")]
    Config { message: String },
    #[error("starting {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("preparing {path}: {source}")]
    Prepare { path: PathBuf, source: std::io::Error },
}

impl StartError {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::RunsAsRoot | Self::Config { .. } => "CreateContainerConfigError",
            Self::Spawn { .. } | Self::Prepare { .. } => "StartError",
        }
    }
}

/// Files the agent keeps for one container.
#[derive(Clone, Debug)]
pub struct ContainerFiles {
    pub log: PathBuf,
    pub termination: PathBuf,
    pub pgid: PathBuf,
}

impl ContainerFiles {
    pub fn new(pod_dir: &Path, container: &str) -> Self {
        Self {
            log: pod_dir.join(format!("{container}.log")),
            termination: pod_dir.join(format!("{container}.termination-log")),
            pgid: pod_dir.join(format!("{container}.pgid")),
        }
    }
}

/// Strips tag and digest: `reg.io/a/b:1.0@sha256:..` -> `reg.io/a/b`.
fn image_repository(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

/// The local binary an image maps to; a mapping key matches the repository or
/// its trailing path (so `mining-operator/miner` matches `ghcr.io/x/mining-operator/miner`).
pub fn resolve_image<'a>(images: &'a [(String, PathBuf)], image: &str) -> Option<&'a Path> {
    let repo = image_repository(image);
    images
        .iter()
        .find(|(key, _)| repo == key || repo.ends_with(&format!("/{key}")))
        .map(|(_, path)| path.as_path())
}

/// Program and argv: `command` overrides the image's entrypoint (the mapped
/// binary), `args` its arguments. A command naming the entrypoint by its file
/// name, or by a path that only exists inside the image, runs the mapped binary.
pub fn program_and_args(container: &Container, entrypoint: &Path) -> (PathBuf, Vec<String>) {
    let args = container.args.clone().unwrap_or_default();
    match container.command.as_deref() {
        Some([program, rest @ ..]) => {
            let path = Path::new(program);
            let names_entrypoint = path.file_name() == entrypoint.file_name();
            let only_in_image = path.is_absolute() && !path.exists();
            let program =
                if names_entrypoint || only_in_image { entrypoint.to_path_buf() } else { path.into() };
            (program, rest.iter().cloned().chain(args).collect())
        }
        _ => (entrypoint.to_path_buf(), args),
    }
}

/// The container's environment: a base PATH, the Pod's hostname, and its `env`
/// with literal values (expanded as the kubelet expands them) and the
/// downward-API fields a kubelet resolves (`status.podIP` is the Pod's own
/// loopback address).
pub(crate) fn environment(
    pod: &Pod,
    container: &Container,
    pod_ip: Ipv4Addr,
    sources: &crate::volumes::EnvSources,
) -> BTreeMap<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let mut env = BTreeMap::from([
        ("PATH".to_string(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()),
        ("HOSTNAME".to_string(), meta.name.clone().unwrap_or_default()),
        ("HOME".to_string(), "/".to_string()),
    ]);
    // As the kubelet does: a value's `$(NAME)` expands with the variables
    // the container's env defined before it, and `$$` is one `$`.
    let mut defined = BTreeMap::new();
    // `envFrom` first, each source's keys with its prefix (never expanded),
    // as the kubelet does; `env` then overrides them.
    for from in container.env_from.iter().flatten() {
        let source = match (&from.secret_ref, &from.config_map_ref) {
            (Some(secret), _) => crate::volumes::secret_source(&secret.name),
            (None, Some(map)) => crate::volumes::config_map_source(&map.name),
            (None, None) => continue,
        };
        let prefix = from.prefix.as_deref().unwrap_or_default();
        for ((_, key), value) in
            sources.range((source.clone(), String::new())..).take_while(|((s, _), _)| *s == source)
        {
            let name = format!("{prefix}{key}");
            if name.is_empty() || name.contains('=') {
                tracing::warn!(var = %name, "not a valid variable name; left unset");
                continue;
            }
            defined.insert(name.clone(), value.clone());
            env.insert(name, value.clone());
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(value) = &var.value {
            Some(crate::network::expand(value, &defined))
        } else if let Some(field) = var.value_from.as_ref().and_then(|v| v.field_ref.as_ref()) {
            match field.field_path.as_str() {
                "metadata.name" => meta.name.clone(),
                "metadata.namespace" => meta.namespace.clone(),
                "metadata.uid" => meta.uid.clone(),
                "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
                "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
                "status.podIP" | "status.podIPs" => Some(pod_ip.to_string()),
                "status.hostIP" => Some("127.0.0.1".to_string()),
                other => {
                    tracing::warn!(field = other, var = %var.name, "unsupported fieldRef; left unset");
                    None
                }
            }
        } else if let Some(reference) = var.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()) {
            // Never expanded: a Secret's value reaches the process as stored.
            sources.get(&(crate::volumes::secret_source(&reference.name), reference.key.clone())).cloned()
        } else {
            tracing::warn!(var = %var.name, "only value, fieldRef and secretKeyRef env (and envFrom) are supported; left unset");
            None
        };
        if let Some(value) = value {
            defined.insert(var.name.clone(), value.clone());
            env.insert(var.name.clone(), value);
        }
    }
    env
}

/// The user the process runs as: the container's, else the Pod's runAsUser;
/// with runAsNonRoot and no user, the distroless `nonroot` user our images declare.
fn run_as(pod: &Pod, container: &Container) -> Result<(Option<u32>, Option<u32>), StartError> {
    let pod_ctx = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let ctx = container.security_context.as_ref();
    let user = ctx.and_then(|c| c.run_as_user).or(pod_ctx.and_then(|c| c.run_as_user));
    let group = ctx.and_then(|c| c.run_as_group).or(pod_ctx.and_then(|c| c.run_as_group));
    let non_root = ctx.and_then(|c| c.run_as_non_root).or(pod_ctx.and_then(|c| c.run_as_non_root));
    let user = match (user, non_root) {
        (Some(0), Some(true)) => return Err(StartError::RunsAsRoot),
        (None, Some(true)) => Some(65532),
        (user, _) => user,
    };
    Ok((user.map(|u| u as u32), group.map(|g| g as u32)))
}

/// What every container of one Pod shares: its address, the in-cluster
/// environment and the host paths bind-mounted into it (source, target): its
/// ServiceAccount credentials and its `/etc/hosts`.
#[derive(Clone, Debug)]
pub struct Sandbox {
    pub pod_ip: Ipv4Addr,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<(PathBuf, PathBuf)>,
    /// The Pod's prepared volumes by name, mounted where a container asks.
    pub volumes: std::collections::BTreeMap<String, PathBuf>,
    /// The values `secretKeyRef` env variables name: (Secret, key) → value.
    pub secrets: crate::volumes::EnvSources,
}

/// Starts the container's process from a host binary (a test double mapped
/// to its image name). The caller waits on the returned child.
pub fn spawn(
    pod: &Pod,
    container: &Container,
    entrypoint: &Path,
    files: &ContainerFiles,
    pod_dir: &Path,
    sandbox: &Sandbox,
) -> Result<tokio::process::Child, StartError> {
    let (program, args) = program_and_args(container, entrypoint);
    let mut env = environment(pod, container, sandbox.pod_ip, &sandbox.secrets);
    for (name, value) in &sandbox.env {
        // The container's own `env` wins, as with the kubelet's service variables.
        env.entry(name.clone()).or_insert_with(|| value.clone());
    }
    let args: Vec<String> = args.iter().map(|arg| crate::network::expand(arg, &env)).collect();
    let (uid, gid) = run_as(pod, container)?;
    let prepare = |path: &Path, source| StartError::Prepare { path: path.to_path_buf(), source };

    // A fresh, world-writable message file: the process may run as non-root.
    std::fs::write(&files.termination, b"").map_err(|e| prepare(&files.termination, e))?;
    set_mode(&files.termination, 0o666).map_err(|e| prepare(&files.termination, e))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&files.log)
        .map_err(|e| prepare(&files.log, e))?;
    let log_err = log.try_clone().map_err(|e| prepare(&files.log, e))?;

    let mut command = tokio::process::Command::new(&program);
    command
        .args(&args)
        .env_clear()
        .envs(&env)
        .current_dir(container.working_dir.as_deref().map_or(pod_dir, Path::new))
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .kill_on_drop(false);
    if nix::unistd::geteuid().is_root() {
        let target = container.termination_message_path.clone().unwrap_or("/dev/termination-log".into());
        // The bind-mount target must exist; an empty file at that host path is harmless.
        let target = PathBuf::from(target);
        if !target.exists() {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| prepare(parent, e))?;
            }
            std::fs::write(&target, b"").map_err(|e| prepare(&target, e))?;
        }
        let source = c_path(&files.termination);
        let target = c_path(&target);
        let mut mounts = Vec::with_capacity(sandbox.mounts.len());
        // The agent's own mounts win: the API server's ServiceAccount
        // admission adds a token Secret volume at the credentials' path,
        // whose CA is not the one this API server serves with.
        let mut own = crate::volumes::mounts_of(container, &sandbox.volumes);
        own.retain(|(_, target)| !sandbox.mounts.iter().any(|(_, taken)| taken == target));
        for (source, mount_point) in sandbox.mounts.iter().chain(&own) {
            // A directory needs an (empty) directory on the host as its mount point.
            if source.is_dir() {
                std::fs::create_dir_all(mount_point).map_err(|e| prepare(mount_point, e))?;
            }
            mounts.push((c_path(source), c_path(mount_point)));
        }
        // The user switch happens in the same closure, after the mounts: std
        // runs pre_exec closures after its own setuid, when mounting is no
        // longer allowed.
        let gid = gid.or(uid);
        // SAFETY: the closure runs between fork and exec; it only makes
        // syscalls on values prepared before the fork (no allocation).
        unsafe {
            command.pre_exec(move || {
                private_termination_file(&source, &target)?;
                for (source, mount_point) in &mounts {
                    bind(source, mount_point)?;
                }
                switch_user(uid, gid)
            });
        }
    } else if uid.is_some() {
        tracing::warn!("not root: runAsUser is ignored and no termination-message mount is made");
    }
    command.spawn().map_err(|source| StartError::Spawn { program: program.display().to_string(), source })
}

pub(crate) fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("paths have no NUL bytes")
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// In the child: a private mount namespace where `source` appears at `target`.
fn private_termination_file(source: &CString, target: &CString) -> std::io::Result<()> {
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, unshare};
    let none: Option<&str> = None;
    unshare(CloneFlags::CLONE_NEWNS)?;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)?;
    mount(Some(source.as_c_str()), target.as_c_str(), none, MsFlags::MS_BIND, none)?;
    Ok(())
}

/// In the child, inside the private mount namespace: `source` at `target`.
fn bind(source: &CString, target: &CString) -> std::io::Result<()> {
    use nix::mount::{MsFlags, mount};
    let none: Option<&str> = None;
    mount(Some(source.as_c_str()), target.as_c_str(), none, MsFlags::MS_BIND, none)?;
    Ok(())
}

fn switch_user(uid: Option<u32>, gid: Option<u32>) -> std::io::Result<()> {
    use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
    if let Some(gid) = gid {
        setgroups(&[])?;
        setgid(Gid::from_raw(gid))?;
    }
    if let Some(uid) = uid {
        setuid(Uid::from_raw(uid))?;
    }
    Ok(())
}

/// The termination message: the file's content, or with FallbackToLogsOnError
/// and a failed, silent container, the tail of its log.
pub fn termination_message(container: &Container, files: &ContainerFiles, exit_code: i32) -> String {
    let written = read_capped(&files.termination, MAX_MESSAGE_BYTES);
    let fallback = container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
    if written.trim().is_empty() && fallback && exit_code != 0 {
        return log_tail(&files.log);
    }
    written
}

fn read_capped(path: &Path, max: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned()
}

fn log_tail(path: &Path) -> String {
    let text = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(FALLBACK_LINES)..].join("\n");
    let start = tail.len().saturating_sub(FALLBACK_BYTES);
    let start = (start..=tail.len()).find(|&i| tail.is_char_boundary(i)).unwrap_or(tail.len());
    tail[start..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_expand_with_the_variables_defined_before_them() {
        let container: Container = serde_json::from_value(serde_json::json!({"name": "c", "env": [
            {"name": "API_KEY", "value": "s3cret"},
            {"name": "ECHO", "value": "key=$(API_KEY) kept=$$(API_KEY) later=$(AFTER)"},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "AFTER", "value": "x"}]}))
        .unwrap();
        let secrets = BTreeMap::from([(("secret/s".to_string(), "k".to_string()), "$(API_KEY)".to_string())]);
        let env = environment(&Pod::default(), &container, Ipv4Addr::LOCALHOST, &secrets);
        assert_eq!(env["ECHO"], "key=s3cret kept=$(API_KEY) later=$(AFTER)");
        assert_eq!(env["FROM_SECRET"], "$(API_KEY)", "a Secret's value is never expanded");
    }

    #[test]
    fn env_from_brings_every_key_with_its_prefix_and_env_overrides_it() {
        // The chart's S3 `existingSecret` reaches the operator by envFrom
        // (red team round 5: the agent ignored it, so that path never ran).
        let container: Container = serde_json::from_value(serde_json::json!({"name": "c",
            "envFrom": [{"secretRef": {"name": "s3"}}, {"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
            "env": [{"name": "AWS_REGION", "value": "eu-$(AWS_ACCESS_KEY_ID)"}, {"name": "CM_A", "value": "mine"}]}))
        .unwrap();
        let sources = BTreeMap::from([
            (("secret/s3".to_string(), "AWS_ACCESS_KEY_ID".to_string()), "id".to_string()),
            (("secret/s3".to_string(), "AWS_SECRET_ACCESS_KEY".to_string()), "$(X)".to_string()),
            (("secret/s3x".to_string(), "OTHER".to_string()), "no".to_string()),
            (("configmap/cm".to_string(), "A".to_string()), "a".to_string()),
            (("configmap/cm".to_string(), "B".to_string()), "b".to_string()),
        ]);
        let env = environment(&Pod::default(), &container, Ipv4Addr::LOCALHOST, &sources);
        assert_eq!(env["AWS_ACCESS_KEY_ID"], "id");
        assert_eq!(env["AWS_SECRET_ACCESS_KEY"], "$(X)", "never expanded");
        assert!(!env.contains_key("OTHER"), "only the named source's keys");
        assert_eq!((env["CM_A"].as_str(), env["CM_B"].as_str()), ("mine", "b"), "env overrides envFrom");
        assert_eq!(env["AWS_REGION"], "eu-id", "env expands what envFrom defined");
    }

    #[test]
    fn image_repository_drops_tag_and_digest_but_not_registry_port() {
        assert_eq!(image_repository("mining-operator/miner:dev"), "mining-operator/miner");
        assert_eq!(image_repository("reg:5000/a/miner"), "reg:5000/a/miner");
        assert_eq!(image_repository("reg:5000/a/miner:1@sha256:ab"), "reg:5000/a/miner");
    }

    #[test]
    fn images_resolve_by_repository_or_trailing_path() {
        let images = vec![("mining-operator/miner".to_string(), PathBuf::from("/bin/miner"))];
        assert_eq!(
            resolve_image(&images, "ghcr.io/x/mining-operator/miner:1"),
            Some(Path::new("/bin/miner"))
        );
        assert_eq!(resolve_image(&images, "mining-operator/miner"), Some(Path::new("/bin/miner")));
        assert_eq!(resolve_image(&images, "other/miner"), None);
    }

    #[test]
    fn command_naming_the_entrypoint_runs_the_mapped_binary() {
        let container = Container {
            command: Some(vec!["/miner".into(), "mine".into()]),
            args: Some(vec!["--index".into(), "1".into()]),
            ..Default::default()
        };
        let (program, args) = program_and_args(&container, Path::new("/opt/bin/miner"));
        assert_eq!(program, Path::new("/opt/bin/miner"));
        assert_eq!(args, ["mine", "--index", "1"]);
    }
}
