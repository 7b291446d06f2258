//! Before a Pod's containers start: their images pulled (with the
//! registry's credentials), and why not, said as a kubelet says it.

use super::*;

impl PodRunner {
    /// How each container starts. While an image cannot be had the Pod
    /// stays Pending with the kubelet's waiting reason (see [`crate::pull`]:
    /// `InvalidImageName`; `ErrImagePull`, then `ImagePullBackOff`; or
    /// `ErrImageNeverPull`) and the images are looked for again every few
    /// seconds; `None` when the Pod is deleted meanwhile.
    pub(super) async fn wait_for_images(
        &self,
        stop_rx: &mut watch::Receiver<Option<Duration>>,
    ) -> Option<Vec<Launch>> {
        let containers = self.pod.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default();
        let mut reported: Option<Vec<(String, &'static str, String)>> = None;
        let mut tried_once = std::collections::HashSet::new();
        loop {
            let mut launches = Vec::with_capacity(containers.len());
            let mut missing: Vec<(String, &'static str, String)> = Vec::new();
            for container in &containers {
                let image = container.image.clone().unwrap_or_default();
                if let Some(problem) = self.pull_problem(container, &image, &mut tried_once).await {
                    missing.push((container.name.clone(), problem.0, problem.1));
                    continue;
                }
                // A private registry serves what this host built (podman's
                // `localhost/…` images) under the same path (its credentials
                // checked above).
                let image = match crate::pull::registry_of(&image) {
                    Some(host) if self.registries.iter().any(|(registry, _)| registry == host) => {
                        format!("localhost/{}", &image[host.len() + 1..])
                    }
                    _ => image,
                };
                if let Some(path) = container::resolve_image(&self.images, &image) {
                    launches.push(Launch::Binary(path.to_path_buf()));
                    continue;
                }
                let resolved = match &self.image_store {
                    Some(store) => store.resolve(&image).await,
                    None => Err(ImageError::NotPresent { reference: image.clone() }),
                };
                match resolved {
                    Ok(image) => launches.push(Launch::Image(image)),
                    Err(err @ ImageError::NotPresent { .. }) => {
                        let (reason, message) = self.not_pulled(container, &image, &mut tried_once);
                        missing.push((
                            container.name.clone(),
                            reason,
                            message.unwrap_or_else(|| err.to_string()),
                        ));
                    }
                    Err(err) => missing.push((container.name.clone(), err.reason(), err.to_string())),
                }
            }
            if missing.is_empty() {
                return Some(launches);
            }
            if reported.as_ref() != Some(&missing) {
                tracing::warn!(pod = %key_of(&self.pod), problem = %missing[0].2, "waiting for an image");
                let statuses: Vec<_> = containers
                    .iter()
                    .map(|c| {
                        let waiting = missing.iter().find(|(name, _, _)| *name == c.name);
                        let (reason, message) =
                            waiting.map_or(("ContainerCreating", ""), |(_, r, m)| (*r, m.as_str()));
                        json!({"name": c.name, "image": c.image, "imageID": "", "ready": false, "restartCount": 0,
                               "state": {"waiting": {"reason": reason, "message": message}}})
                    })
                    .collect();
                let patch = json!({"status": {"phase": "Pending", "hostIP": "127.0.0.1",
                    "podIP": self.pod_ip.to_string(), "podIPs": [{"ip": self.pod_ip.to_string()}],
                    "containerStatuses": statuses}});
                patch_status(&self.client, &self.pod, patch).await;
                reported = Some(missing);
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(3)) => {}
                _ = stop_rx.changed() => return None,
            }
        }
    }

    /// Pending, every container waiting with `reason` and `message`.
    pub(super) async fn report_waiting(&self, reason: &str, message: &str) {
        let containers = self.pod.spec.iter().flat_map(|s| &s.containers);
        let statuses: Vec<_> = containers
            .map(|c| {
                json!({"name": c.name, "image": c.image, "imageID": "", "ready": false, "restartCount": 0,
                       "state": {"waiting": {"reason": reason, "message": message}}})
            })
            .collect();
        let patch =
            json!({"status": {"phase": "Pending", "hostIP": "127.0.0.1", "containerStatuses": statuses}});
        patch_status(&self.client, &self.pod, patch).await;
    }

    /// Why `image` cannot be pulled before it is even looked for: a
    /// reference that does not parse, or a private registry's image
    /// without the Pod's credentials for it.
    pub(super) async fn pull_problem(
        &self,
        container: &k8s_openapi::api::core::v1::Container,
        image: &str,
        tried_once: &mut std::collections::HashSet<String>,
    ) -> Option<(&'static str, String)> {
        if !crate::pull::valid_reference(image) {
            let message = format!(
                "Failed to apply default image tag {image:?}: couldn't parse image reference {image:?}: invalid reference format"
            );
            return Some(("InvalidImageName", message));
        }
        let host = crate::pull::registry_of(image)?;
        let (_, credentials) = self.registries.iter().find(|(registry, _)| registry == host)?;
        if crate::pull::has_credentials(&self.client, &self.pod, host, credentials).await {
            return None;
        }
        let denied = format!(
            "failed to pull and unpack image {image:?}: failed to resolve reference {image:?}: pull access denied, \
             repository does not exist or may require authorization: authorization failed: no basic auth credentials"
        );
        let (reason, message) = self.not_pulled(container, image, tried_once);
        Some((reason, if reason == "ErrImagePull" { denied } else { message.unwrap_or(denied) }))
    }

    /// The kubelet's reason for an image it could not pull: `ErrImagePull`
    /// the first time, `ImagePullBackOff` after; `ErrImageNeverPull` when
    /// the policy forbids pulling. The message, when the reason has its own.
    pub(super) fn not_pulled(
        &self,
        container: &k8s_openapi::api::core::v1::Container,
        image: &str,
        tried_once: &mut std::collections::HashSet<String>,
    ) -> (&'static str, Option<String>) {
        if container.image_pull_policy.as_deref() == Some("Never") {
            return ("ErrImageNeverPull", None);
        }
        if tried_once.insert(container.name.clone()) {
            let message = format!(
                "failed to pull and unpack image {image:?}: not found (the node agent pulls nothing: build it with `make images`)"
            );
            ("ErrImagePull", Some(message))
        } else {
            ("ImagePullBackOff", Some(format!("Back-off pulling image {image:?}")))
        }
    }
}
