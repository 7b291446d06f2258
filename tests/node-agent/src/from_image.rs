//! A container started from its image, as runc would start it but without
//! network, PID or cgroup namespaces (Pods share the host's network at their
//! own Pod IP): a fresh copy of the image's root filesystem, the Pod's mounts
//! bound into it, `/proc` and the usual devices, then in the child — in a
//! private mount namespace — the root made read-only when the container asks,
//! `chroot`, the working directory, the capability bounding set dropped,
//! `no_new_privs`, and the image's or the Pod's user. What the image lacks
//! (a dynamic loader, a CA file, a writable path) fails here as it fails for
//! users.

use std::ffi::CString;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::container::{ContainerFiles, Sandbox, StartError, c_path, environment};
use crate::image::{self, Image};

/// The character devices a container runtime gives every container.
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// Everything the child does between fork and exec, prepared before the fork
/// (the closure must not allocate).
struct RootPlan {
    root: CString,
    /// (host source, target under root, read-only)
    binds: Vec<(CString, CString, bool)>,
    proc_dir: CString,
    read_only_root: bool,
    working_dir: CString,
    /// Capabilities to remove from the bounding set (and, for root, from the process).
    drop_capabilities: Vec<u32>,
    no_new_privileges: bool,
    uid: u32,
    gid: u32,
}

/// The path of `target` (absolute, inside the container) under `root`;
/// `None` for a path that would leave the root.
fn under_root(root: &Path, target: &Path) -> Option<PathBuf> {
    let mut path = root.to_path_buf();
    for component in target.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => path.push(part),
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(path)
}

/// Linux capability numbers by name, as `capabilities.drop` spells them.
fn capability_number(name: &str) -> Option<u32> {
    const NAMES: [&str; 41] = [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    let name = name.strip_prefix("CAP_").unwrap_or(name);
    NAMES.iter().position(|known| known.eq_ignore_ascii_case(name)).map(|n| n as u32)
}

/// The capabilities `drop` names; `ALL` is every one the kernel may have.
pub fn dropped_capabilities(drop: &[String]) -> Vec<u32> {
    if drop.iter().any(|name| name.eq_ignore_ascii_case("ALL")) {
        return (0..64).collect();
    }
    drop.iter().filter_map(|name| capability_number(name)).collect()
}

fn prepare_error(path: &Path, source: std::io::Error) -> StartError {
    StartError::Prepare { path: path.to_path_buf(), source }
}

/// Creates an empty file or directory at `mount_point` (like `source`) for a bind mount.
fn make_mount_point(source: &Path, mount_point: &Path) -> Result<(), StartError> {
    if source.is_dir() {
        return std::fs::create_dir_all(mount_point).map_err(|e| prepare_error(mount_point, e));
    }
    if let Some(parent) = mount_point.parent() {
        std::fs::create_dir_all(parent).map_err(|e| prepare_error(parent, e))?;
    }
    if !mount_point.exists() {
        std::fs::write(mount_point, b"").map_err(|e| prepare_error(mount_point, e))?;
    }
    Ok(())
}

/// Starts `container` of `pod` from `image`. The caller waits on the child.
pub fn spawn(
    pod: &Pod,
    container: &Container,
    image: &Image,
    files: &ContainerFiles,
    pod_dir: &Path,
    sandbox: &Sandbox,
) -> Result<tokio::process::Child, StartError> {
    let config_error = |message: String| StartError::Config { message };
    let (uid, gid) = image::user(pod, container, &image.config).map_err(|e| config_error(e.to_string()))?;

    // The image's env under the container's own, over the defaults.
    let mut env = environment(pod, container, sandbox.pod_ip, &sandbox.secrets);
    let own: std::collections::BTreeSet<&str> =
        container.env.iter().flatten().map(|var| var.name.as_str()).collect();
    for (name, value) in &image.config.env {
        if !own.contains(name.as_str()) {
            env.insert(name.clone(), value.clone());
        }
    }
    for (name, value) in &sandbox.env {
        env.entry(name.clone()).or_insert_with(|| value.clone());
    }
    let argv: Vec<String> =
        image::argv(container, &image.config).iter().map(|arg| crate::network::expand(arg, &env)).collect();
    let Some((program, args)) = argv.split_first() else {
        return Err(config_error(format!(
            "image {} has no entrypoint and the container no command",
            image.reference
        )));
    };

    // A fresh root per start. A read-only root may share the image's files
    // (hard links); a writable one gets its own copy.
    let security = container.security_context.as_ref();
    let read_only_root = security.and_then(|s| s.read_only_root_filesystem) == Some(true);
    let root = pod_dir.join("rootfs").join(&container.name);
    if root.exists() {
        std::fs::remove_dir_all(&root).map_err(|e| prepare_error(&root, e))?;
    }
    image::copy_tree(&image.rootfs, &root, read_only_root)
        .map_err(|message| prepare_error(&root, std::io::Error::other(message)))?;

    std::fs::write(&files.termination, b"").map_err(|e| prepare_error(&files.termination, e))?;
    crate::container::set_mode(&files.termination, 0o666)
        .map_err(|e| prepare_error(&files.termination, e))?;
    let termination_path =
        container.termination_message_path.clone().unwrap_or("/dev/termination-log".into());
    let mut wanted: Vec<(PathBuf, PathBuf, bool)> =
        DEVICES.iter().map(|d| (d.into(), d.into(), false)).collect();
    wanted.push((files.termination.clone(), termination_path.into(), false));
    // The agent's own mounts (credentials, /etc/hosts) win, as in `container::spawn`.
    for (source, target) in &sandbox.mounts {
        wanted.push((source.clone(), target.clone(), true));
    }
    for mount in container.volume_mounts.iter().flatten() {
        let Some(source) = sandbox.volumes.get(&mount.name) else { continue };
        let target = PathBuf::from(&mount.mount_path);
        if sandbox.mounts.iter().any(|(_, taken)| *taken == target) {
            continue;
        }
        wanted.push((source.clone(), target, mount.read_only == Some(true)));
    }
    let mut binds = Vec::with_capacity(wanted.len());
    for (source, target, read_only) in wanted {
        let mount_point = under_root(&root, &target)
            .ok_or_else(|| config_error(format!("mount path {} leaves the root", target.display())))?;
        make_mount_point(&source, &mount_point)?;
        binds.push((c_path(&source), c_path(&mount_point), read_only));
    }
    let proc_dir = root.join("proc");
    std::fs::create_dir_all(&proc_dir).map_err(|e| prepare_error(&proc_dir, e))?;
    let working_dir = container
        .working_dir
        .clone()
        .filter(|dir| !dir.is_empty())
        .unwrap_or_else(|| image.config.working_dir.clone());
    let working_dir = if working_dir.is_empty() { "/".to_string() } else { working_dir };
    let plan = RootPlan {
        root: c_path(&root),
        binds,
        proc_dir: c_path(&proc_dir),
        read_only_root,
        working_dir: c_path(Path::new(&working_dir)),
        drop_capabilities: dropped_capabilities(
            security
                .and_then(|s| s.capabilities.as_ref())
                .and_then(|c| c.drop.as_deref())
                .unwrap_or_default(),
        ),
        no_new_privileges: security.and_then(|s| s.allow_privilege_escalation) == Some(false),
        uid,
        gid,
    };

    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&files.log)
        .map_err(|e| prepare_error(&files.log, e))?;
    let log_err = log.try_clone().map_err(|e| prepare_error(&files.log, e))?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(&env)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .kill_on_drop(false);
    // SAFETY: the closure runs between fork and exec; it only makes syscalls
    // on values prepared before the fork (no allocation).
    unsafe {
        command.pre_exec(move || enter(&plan));
    }
    command.spawn().map_err(|source| StartError::Spawn {
        program: format!("{program} (in image {})", image.reference),
        source,
    })
}

/// In the child: the container's root, mounts, user and privileges.
fn enter(plan: &RootPlan) -> std::io::Result<()> {
    use nix::libc;
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, unshare};
    let none: Option<&str> = None;
    unshare(CloneFlags::CLONE_NEWNS)?;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)?;
    // The root must be a mount of its own to be made read-only.
    mount(Some(plan.root.as_c_str()), plan.root.as_c_str(), none, MsFlags::MS_BIND | MsFlags::MS_REC, none)?;
    for (source, target, read_only) in &plan.binds {
        mount(Some(source.as_c_str()), target.as_c_str(), none, MsFlags::MS_BIND, none)?;
        if *read_only {
            let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
            mount(none, target.as_c_str(), none, flags, none)?;
        }
    }
    let proc_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if mount(Some("proc"), plan.proc_dir.as_c_str(), Some("proc"), proc_flags, none).is_err() {
        // Where a new proc cannot be mounted (a sandbox without its own PID
        // namespace), the host's is bound read-only instead.
        mount(Some("/proc"), plan.proc_dir.as_c_str(), none, MsFlags::MS_BIND | MsFlags::MS_REC, none)?;
    }
    if plan.read_only_root {
        let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        mount(none, plan.root.as_c_str(), none, flags, none)?;
    }
    // SAFETY: plain syscalls on NUL-terminated strings prepared before the fork.
    unsafe {
        if libc::chroot(plan.root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::chdir(plan.working_dir.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for &capability in &plan.drop_capabilities {
            // EINVAL: a number beyond what this kernel has.
            libc::prctl(libc::PR_CAPBSET_DROP, capability as libc::c_ulong, 0, 0, 0);
        }
        if plan.no_new_privileges && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(plan.gid) != 0
            || libc::setuid(plan.uid) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    // A non-root user lost every capability with setuid; root keeps what
    // it had unless the container dropped everything.
    if plan.uid == 0 && plan.drop_capabilities.len() >= 64 {
        clear_capabilities()?;
    }
    Ok(())
}

/// capset(2) with empty sets (version 3: two 32-bit words per set).
fn clear_capabilities() -> std::io::Result<()> {
    use nix::libc;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header { version: 0x2008_0522, pid: 0 };
    let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: the kernel reads a header and two data entries that live on this stack.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if rc != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_targets_stay_under_the_root() {
        let root = Path::new("/state/rootfs/c");
        assert_eq!(
            under_root(root, Path::new("/etc/hosts")),
            Some(PathBuf::from("/state/rootfs/c/etc/hosts"))
        );
        assert_eq!(under_root(root, Path::new("/a/./b")), Some(PathBuf::from("/state/rootfs/c/a/b")));
        assert_eq!(under_root(root, Path::new("/../../etc/shadow")), None);
        assert_eq!(under_root(root, Path::new("/a/../../x")), None);
    }

    #[test]
    fn capabilities_drop_by_name_or_all() {
        assert_eq!(dropped_capabilities(&["NET_RAW".into(), "CAP_SYS_ADMIN".into()]), [13, 21]);
        assert_eq!(dropped_capabilities(&["ALL".into()]).len(), 64);
        assert!(dropped_capabilities(&["NOT_A_CAP".into()]).is_empty());
    }
}
