//! What admission controllers may add to a Pod without changing what its
//! own containers compute (pure), for both kinds of work.
//!
//! Real clusters mutate Pods as they are created: a service mesh (Istio,
//! Linkerd) adds a proxy container and an init container that sets up its
//! network, a secrets agent or a policy engine adds containers, volumes,
//! labels and annotations, a LimitRange adds resources. None of that changes
//! what the template's own containers print, as long as nothing added can
//! reach them: a container's termination message is a file of its own
//! (kubelet-made, mounted only into it), so another container could write it
//! only by sharing the Pod's process namespace (`/proc/PID/root`), through
//! the node's filesystem (a `hostPath` volume, a privileged container, or the
//! capabilities that stand for one), or by being attached to it later (an
//! ephemeral container). So a Pod's additions are accepted when none does
//! any of those, and the template's containers and volumes are then compared
//! ([`strip`] hands them back alone; [`crate::provenance`] compares).

use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

/// Capabilities that reach beyond a container's own filesystem and
/// processes (mounts, tracing, reading any file, kernel modules).
const REACHING_CAPABILITIES: [&str; 6] =
    ["ALL", "SYS_ADMIN", "SYS_PTRACE", "SYS_MODULE", "DAC_READ_SEARCH", "DAC_OVERRIDE"];

/// Capabilities that let a container redirect the Pod's traffic: what a
/// mesh's init container needs when the mesh runs without its CNI plugin.
const NETWORK_CAPABILITIES: [&str; 2] = ["NET_ADMIN", "NET_RAW"];

/// What the template's containers depend on besides their own files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// Nothing (a miner computes offline): an added container may hold the
    /// network capabilities a mesh's init container needs.
    Nothing,
    /// The network (a tool may call anything): an added container that
    /// could redirect the Pod's traffic is refused, since a Pod planted with
    /// the template's containers and such a companion could answer the
    /// tool's calls itself. Meshes run in their CNI mode need none.
    Network,
}

/// `stored` less what admission added (containers, init containers and
/// volumes its template does not name), when none of that can reach the
/// template's containers; else why not. The API server's order is kept.
pub fn strip(stored: &PodSpec, template: &PodSpec, reads: Reads) -> Result<PodSpec, String> {
    if stored.share_process_namespace == Some(true) && template.share_process_namespace != Some(true) {
        return Err("it shares its process namespace (its other containers can reach the template's)".into());
    }
    if !stored.ephemeral_containers.as_ref().is_none_or(Vec::is_empty) {
        return Err("it has ephemeral containers".into());
    }
    let named = |list: &Option<Vec<Container>>| -> Vec<String> {
        list.iter().flatten().map(|c| c.name.clone()).collect()
    };
    let (own, own_init) = (named(&Some(template.containers.clone())), named(&template.init_containers));
    let mut kept = stored.clone();
    kept.containers = split(&stored.containers, &own, reads)?;
    kept.init_containers = match &stored.init_containers {
        Some(list) => Some(split(list, &own_init, reads)?),
        None => None,
    };
    let own_volumes: Vec<&str> = template.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    let mut volumes = Vec::new();
    for volume in stored.volumes.iter().flatten() {
        if own_volumes.contains(&volume.name.as_str()) {
            volumes.push(volume.clone());
        } else if let Some(kind) = reaching_volume(volume) {
            return Err(format!("admission added a {kind} volume ({:?})", volume.name));
        } else if mounted_by(&kept, &volume.name) {
            // A template container mounting an added volume: kept, so the
            // kind's own comparison of its mounts sees it.
            volumes.push(volume.clone());
        }
    }
    kept.volumes = (!volumes.is_empty() || stored.volumes.is_some()).then_some(volumes);
    Ok(kept)
}

/// The containers of `stored` the template names; the others (admission's)
/// checked not to reach them.
fn split(stored: &[Container], own: &[String], reads: Reads) -> Result<Vec<Container>, String> {
    let mut kept = Vec::new();
    for container in stored {
        if own.contains(&container.name) {
            kept.push(container.clone());
        } else if let Some(why) = reaching_container(container, reads) {
            return Err(format!("admission added container {:?}, which {why}", container.name));
        }
    }
    Ok(kept)
}

/// Why an added container could reach another container's files, if it could.
fn reaching_container(container: &Container, reads: Reads) -> Option<&'static str> {
    let security = container.security_context.as_ref()?;
    if security.privileged == Some(true) {
        return Some("is privileged");
    }
    let added: Vec<&str> = security
        .capabilities
        .as_ref()
        .and_then(|c| c.add.as_ref())
        .into_iter()
        .flatten()
        .map(|cap| cap.trim_start_matches("CAP_"))
        .collect();
    if added.iter().any(|cap| REACHING_CAPABILITIES.contains(cap)) {
        return Some("adds a capability that reaches beyond its own filesystem");
    }
    if reads == Reads::Network && added.iter().any(|cap| NETWORK_CAPABILITIES.contains(cap)) {
        return Some(
            "could redirect the Pod's traffic (NET_ADMIN or NET_RAW), which a tool's result may depend on",
        );
    }
    None
}

/// The kind of an added volume that could reach the node or other Pods'
/// data (anything but the Pod-local kinds meshes and agents use).
fn reaching_volume(volume: &Volume) -> Option<&'static str> {
    let local = volume.empty_dir.is_some()
        || volume.config_map.is_some()
        || volume.secret.is_some()
        || volume.projected.is_some()
        || volume.downward_api.is_some();
    if local {
        None
    } else if volume.host_path.is_some() {
        Some("hostPath")
    } else {
        Some("non-local")
    }
}

fn mounted_by(pod: &PodSpec, volume: &str) -> bool {
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| m.name == volume)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::inject_mesh;
    use serde_json::json;

    fn template() -> PodSpec {
        serde_json::from_value(json!({"containers": [{"name": "work", "image": "example/work"}]})).unwrap()
    }

    #[test]
    fn a_mesh_s_additions_are_set_aside_and_the_template_s_part_is_what_is_left() {
        let mut stored = template();
        inject_mesh(&mut stored);
        let kept = strip(&stored, &template(), Reads::Nothing).unwrap();
        assert_eq!(kept.containers, template().containers);
        assert_eq!(kept.init_containers, Some(vec![]));
        assert_eq!(kept.volumes, Some(vec![]));
    }

    #[test]
    fn an_addition_that_could_reach_the_template_s_containers_is_named() {
        type Reach = fn(&mut PodSpec);
        let cases: [(&str, Reach); 6] = [
            ("process namespace", |s| s.share_process_namespace = Some(true)),
            ("privileged", |s| {
                s.containers[1].security_context.get_or_insert_default().privileged = Some(true)
            }),
            ("capability", |s| {
                let init = &mut s.init_containers.as_mut().unwrap()[0];
                init.security_context.get_or_insert_default().capabilities.get_or_insert_default().add =
                    Some(vec!["SYS_PTRACE".into()]);
            }),
            ("hostPath", |s| {
                s.volumes.as_mut().unwrap().push(
                    serde_json::from_value(
                        json!({"name": "kubelet", "hostPath": {"path": "/var/lib/kubelet"}}),
                    )
                    .unwrap(),
                )
            }),
            ("non-local", |s| {
                s.volumes.as_mut().unwrap().push(
                    serde_json::from_value(json!({"name": "nfs", "nfs": {"server": "x", "path": "/"}}))
                        .unwrap(),
                )
            }),
            ("ephemeral", |s| {
                s.ephemeral_containers = Some(vec![
                    serde_json::from_value(json!({"name": "debug", "targetContainerName": "work"})).unwrap(),
                ])
            }),
        ];
        for (what, reach) in cases {
            let mut stored = template();
            inject_mesh(&mut stored);
            reach(&mut stored);
            let why = strip(&stored, &template(), Reads::Nothing).expect_err(what);
            assert!(!why.is_empty(), "{what}");
        }
    }

    #[test]
    fn a_network_capable_addition_is_refused_where_the_template_reads_the_network() {
        let mut stored = template();
        inject_mesh(&mut stored);
        assert!(strip(&stored, &template(), Reads::Nothing).is_ok(), "a miner computes offline");
        let why = strip(&stored, &template(), Reads::Network).unwrap_err();
        assert!(why.contains("istio-init") && why.contains("NET_ADMIN"), "{why}");
        // The same mesh in its CNI mode (no init container) is accepted.
        stored.init_containers = None;
        assert!(strip(&stored, &template(), Reads::Network).is_ok());
    }

    #[test]
    fn an_added_volume_a_template_container_mounts_is_kept_for_the_kind_to_judge() {
        let mut stored = template();
        inject_mesh(&mut stored);
        stored.containers[0].volume_mounts =
            Some(vec![serde_json::from_value(json!({"name": "istio-envoy", "mountPath": "/bin"})).unwrap()]);
        let kept = strip(&stored, &template(), Reads::Nothing).unwrap();
        assert_eq!(kept.volumes.unwrap().len(), 1, "the mounted one stays, so the mount is compared");
    }
}
