//! The Pod Security Standards' "restricted" profile (Kubernetes 1.30+, the
//! `latest` version; it includes "baseline") as a table of its controls,
//! each checked the way the upstream profile documents it
//! (kubernetes.io/docs/concepts/security/pod-security-standards). No
//! maintained checker of the profile ships in the package registries this
//! project can reach (PyPI, npm, crates.io, Debian), and the local API
//! server (1.20) predates Pod Security admission: this table stands in,
//! with the profile's documented allowed and refused values as fixtures
//! (tests/pod_security.rs).

use k8s_openapi::api::core::v1::{Container, PodSpec, SecurityContext};

/// One control of the profile: its name and what it says of a Pod spec
/// (`Some(why)` when the Pod breaks it).
pub struct Control {
    pub name: &'static str,
    pub check: fn(&PodSpec) -> Option<String>,
}

/// Every container of the Pod, init containers first. (Ephemeral
/// containers are added by `kubectl debug`, never by a template.)
fn containers(pod: &PodSpec) -> Vec<(&str, Option<&SecurityContext>, &Container)> {
    let all = pod.init_containers.iter().flatten().chain(&pod.containers);
    all.map(|c| (c.name.as_str(), c.security_context.as_ref(), c)).collect()
}

const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
const SAFE_SYSCTLS: [&str; 9] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
];

fn first(pod: &PodSpec, broken: impl Fn(&SecurityContext, &Container) -> Option<String>) -> Option<String> {
    containers(pod).into_iter().find_map(|(name, context, container)| {
        let context = context.cloned().unwrap_or_default();
        broken(&context, container).map(|why| format!("container {name}: {why}"))
    })
}

/// The profile, control by control (baseline's first, then restricted's).
pub const RESTRICTED: [Control; 16] = [
    Control {
        name: "HostProcess",
        check: |pod| {
            let pod_level =
                pod.security_context.as_ref().and_then(|c| c.windows_options.as_ref()?.host_process);
            if pod_level == Some(true) {
                return Some("hostProcess".into());
            }
            first(pod, |c, _| {
                (c.windows_options.as_ref()?.host_process == Some(true)).then(|| "hostProcess".into())
            })
        },
    },
    Control {
        name: "Host Namespaces",
        check: |pod| {
            let shared =
                [("hostNetwork", pod.host_network), ("hostPID", pod.host_pid), ("hostIPC", pod.host_ipc)];
            shared.iter().find(|(_, on)| *on == Some(true)).map(|(what, _)| format!("{what}: true"))
        },
    },
    Control {
        name: "Privileged Containers",
        check: |pod| first(pod, |c, _| (c.privileged == Some(true)).then(|| "privileged: true".into())),
    },
    Control {
        name: "Capabilities (baseline)",
        check: |pod| {
            first(pod, |c, _| {
                let added = c.capabilities.as_ref()?.add.as_ref()?;
                added
                    .iter()
                    .find(|cap| !BASELINE_CAPABILITIES.contains(&cap.as_str()))
                    .map(|cap| format!("adds {cap}"))
            })
        },
    },
    Control {
        name: "HostPath Volumes",
        check: |pod| {
            let volumes = pod.volumes.iter().flatten();
            volumes.into_iter().find(|v| v.host_path.is_some()).map(|v| format!("hostPath volume {}", v.name))
        },
    },
    Control {
        name: "Host Ports",
        check: |pod| {
            first(pod, |_, container| {
                let ports = container.ports.iter().flatten();
                ports
                    .into_iter()
                    .find(|p| p.host_port.unwrap_or(0) != 0)
                    .map(|p| format!("hostPort {:?}", p.host_port))
            })
        },
    },
    Control {
        name: "AppArmor",
        check: |pod| {
            let allowed = |profile: &k8s_openapi::api::core::v1::AppArmorProfile| {
                matches!(profile.type_.as_str(), "RuntimeDefault" | "Localhost")
            };
            let pod_level = pod.security_context.as_ref().and_then(|c| c.app_armor_profile.as_ref());
            if pod_level.is_some_and(|p| !allowed(p)) {
                return Some("AppArmor profile Unconfined".into());
            }
            first(pod, |c, _| {
                c.app_armor_profile
                    .as_ref()
                    .filter(|p| !allowed(p))
                    .map(|_| "AppArmor profile Unconfined".into())
            })
        },
    },
    Control {
        name: "SELinux",
        check: |pod| {
            let broken = |options: Option<&k8s_openapi::api::core::v1::SELinuxOptions>| {
                let options = options?;
                let types = ["container_t", "container_init_t", "container_kvm_t", "container_engine_t"];
                let bad_type = options.type_.as_deref().is_some_and(|t| !types.contains(&t));
                (bad_type || options.user.is_some() || options.role.is_some())
                    .then(|| "SELinux options".to_string())
            };
            broken(pod.security_context.as_ref().and_then(|c| c.se_linux_options.as_ref()))
                .or_else(|| first(pod, |c, _| broken(c.se_linux_options.as_ref())))
        },
    },
    Control {
        name: "/proc Mount Type",
        check: |pod| {
            first(pod, |c, _| {
                c.proc_mount.as_deref().filter(|m| *m != "Default").map(|m| format!("procMount {m}"))
            })
        },
    },
    Control {
        name: "Seccomp (baseline)",
        check: |pod| {
            let unconfined = |p: Option<&k8s_openapi::api::core::v1::SeccompProfile>| {
                p.is_some_and(|p| p.type_ == "Unconfined")
            };
            if unconfined(pod.security_context.as_ref().and_then(|c| c.seccomp_profile.as_ref())) {
                return Some("seccomp Unconfined".into());
            }
            first(pod, |c, _| unconfined(c.seccomp_profile.as_ref()).then(|| "seccomp Unconfined".into()))
        },
    },
    Control {
        name: "Sysctls",
        check: |pod| {
            let sysctls = pod.security_context.as_ref().and_then(|c| c.sysctls.as_ref());
            sysctls
                .into_iter()
                .flatten()
                .find(|s| !SAFE_SYSCTLS.contains(&s.name.as_str()))
                .map(|s| format!("sysctl {}", s.name))
        },
    },
    Control {
        name: "Volume Types",
        check: |pod| {
            pod.volumes.iter().flatten().find_map(|volume| {
                let json = serde_json::to_value(volume).ok()?;
                let kind = json.as_object()?.keys().find(|k| *k != "name")?.clone();
                (!RESTRICTED_VOLUMES.contains(&kind.as_str()))
                    .then(|| format!("volume {} of type {kind}", volume.name))
            })
        },
    },
    Control {
        name: "Privilege Escalation",
        check: |pod| {
            first(pod, |c, _| {
                (c.allow_privilege_escalation != Some(false))
                    .then(|| "allowPrivilegeEscalation is not false".into())
            })
        },
    },
    Control {
        name: "Running as Non-root",
        check: |pod| {
            let pod_level = pod.security_context.as_ref().and_then(|c| c.run_as_non_root);
            first(pod, |c, _| match c.run_as_non_root.or(pod_level) {
                Some(true) => None,
                _ => Some("runAsNonRoot is not true".into()),
            })
        },
    },
    Control {
        name: "Running as Non-root user",
        check: |pod| {
            if pod.security_context.as_ref().and_then(|c| c.run_as_user) == Some(0) {
                return Some("runAsUser 0".into());
            }
            first(pod, |c, _| (c.run_as_user == Some(0)).then(|| "runAsUser 0".into()))
        },
    },
    Control {
        name: "Seccomp (restricted) and Capabilities (restricted)",
        check: |pod| {
            let allowed = |p: &k8s_openapi::api::core::v1::SeccompProfile| {
                matches!(p.type_.as_str(), "RuntimeDefault" | "Localhost")
            };
            let pod_level = pod.security_context.as_ref().and_then(|c| c.seccomp_profile.as_ref());
            first(pod, |c, _| {
                let seccomp_ok = match c.seccomp_profile.as_ref() {
                    Some(own) => allowed(own),
                    None => pod_level.is_some_and(allowed),
                };
                if !seccomp_ok {
                    return Some("seccompProfile is not RuntimeDefault or Localhost".into());
                }
                let capabilities = c.capabilities.clone().unwrap_or_default();
                if !capabilities.drop.iter().flatten().any(|d| d == "ALL") {
                    return Some("capabilities.drop does not include ALL".into());
                }
                capabilities
                    .add
                    .iter()
                    .flatten()
                    .find(|a| *a != "NET_BIND_SERVICE")
                    .map(|a| format!("capabilities.add {a}"))
            })
        },
    },
];

/// What of "restricted" `pod` breaks: each control's name and why.
pub fn restricted_violations(pod: &PodSpec) -> Vec<String> {
    RESTRICTED
        .iter()
        .filter_map(|control| (control.check)(pod).map(|why| format!("{}: {why}", control.name)))
        .collect()
}
