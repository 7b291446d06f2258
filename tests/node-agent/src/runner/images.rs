//! Before a Pod's containers start: their images, pulled as a kubelet
//! pulls them (see [`crate::pull`]), and why not, said as a kubelet says it.

use std::collections::HashMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::Container;

use super::*;

/// The first wait after a failed pull; it doubles up to [`MAX_PULL_BACKOFF`].
/// (A kubelet waits 10 s doubling to 300 s; far shorter here, so that a
/// test that adds the missing pull secret sees the next pull within
/// seconds, well inside an operator's pod-start bound of 20 s.)
const FIRST_PULL_BACKOFF: Duration = Duration::from_secs(2);
const MAX_PULL_BACKOFF: Duration = Duration::from_secs(4);

/// What one Pod's pulls have done so far, per container name.
#[derive(Default)]
pub(super) struct Pulls {
    /// Failed pulls in a row and when the next may be tried.
    failed: HashMap<String, (u32, Instant)>,
    /// Pulled for this Pod already (an `Always` image is pulled once per start).
    pulled: std::collections::HashSet<String>,
    /// Images no registry serves here, reported `ErrImagePull` once.
    reported_missing: std::collections::HashSet<String>,
}

/// Why a container cannot start yet: the kubelet's waiting reason and message.
pub(super) type NotReady = (&'static str, String);

impl PodRunner {
    /// How each container starts. While an image cannot be had the Pod
    /// stays Pending with the kubelet's waiting reason (`InvalidImageName`;
    /// `ErrImagePull`, then `ImagePullBackOff`; or `ErrImageNeverPull`) and
    /// the images are looked for again every few seconds; `None` when the
    /// Pod is deleted meanwhile.
    pub(super) async fn wait_for_images(
        &self,
        stop_rx: &mut watch::Receiver<Option<Duration>>,
    ) -> Option<Vec<Launch>> {
        let containers = self.pod.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default();
        let mut reported: Option<Vec<(String, &'static str, String)>> = None;
        let mut pulls = Pulls::default();
        loop {
            let mut launches = Vec::with_capacity(containers.len());
            let mut missing: Vec<(String, &'static str, String)> = Vec::new();
            for container in &containers {
                match self.launch(container, &mut pulls).await {
                    Ok(launch) => launches.push(launch),
                    Err((reason, message)) => missing.push((container.name.clone(), reason, message)),
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

    /// How `container` starts, pulling its image first when its policy and
    /// the store say so, or why it cannot start yet.
    pub(super) async fn launch(&self, container: &Container, pulls: &mut Pulls) -> Result<Launch, NotReady> {
        let image = container.image.clone().unwrap_or_default();
        if !crate::pull::valid_reference(&image) {
            let message = format!(
                "Failed to apply default image tag {image:?}: couldn't parse image reference {image:?}: invalid reference format"
            );
            return Err(("InvalidImageName", message));
        }
        if let Some(path) = container::resolve_image(&self.images, &image) {
            return Ok(Launch::Binary(path.to_path_buf()));
        }
        let Some(store) = &self.image_store else {
            return Err(self.not_found(container, &image, pulls));
        };
        let policy = crate::pull::policy(container);
        let reachable = crate::pull::registry_of(&image)
            .filter(|host| self.puller.as_ref().is_some_and(|puller| puller.reaches(host).is_some()));
        let must_pull = policy == "Always" && reachable.is_some() && !pulls.pulled.contains(&container.name);
        if !must_pull {
            match store.resolve(&image).await {
                Ok(found) => return Ok(Launch::Image(found)),
                Err(ImageError::NotPresent { .. }) => {}
                Err(err) => return Err((err.reason(), err.to_string())),
            }
            if policy == "Never" {
                let normalized = crate::image::reference(&image);
                let message =
                    format!("Container image {normalized:?} is not present with pull policy of Never");
                return Err(("ErrImageNeverPull", message));
            }
        }
        let (Some(host), Some(puller)) = (reachable, &self.puller) else {
            return Err(self.not_found(container, &image, pulls));
        };
        if let Some((_, next)) = pulls.failed.get(&container.name)
            && Instant::now() < *next
        {
            return Err(("ImagePullBackOff", format!("Back-off pulling image {image:?}")));
        }
        let credentials = crate::pull::pod_credentials(&self.client, &self.pod, host).await;
        match puller.pull(&image, host, &credentials).await {
            Ok(()) => {
                tracing::info!(pod = %key_of(&self.pod), %image, "pulled");
                pulls.failed.remove(&container.name);
                pulls.pulled.insert(container.name.clone());
                let found = store.resolve(&image).await.map_err(|err| (err.reason(), err.to_string()))?;
                Ok(Launch::Image(found))
            }
            Err(refusal) => {
                let failures = pulls.failed.get(&container.name).map_or(0, |(n, _)| *n) + 1;
                let backoff =
                    FIRST_PULL_BACKOFF.saturating_mul(1 << (failures - 1).min(8)).min(MAX_PULL_BACKOFF);
                pulls.failed.insert(container.name.clone(), (failures, Instant::now() + backoff));
                Err(("ErrImagePull", format!("Failed to pull image {image:?}: {refusal}")))
            }
        }
    }

    /// An image neither in the store nor in a registry this node reaches:
    /// `ErrImagePull` the first time, `ImagePullBackOff` after.
    fn not_found(&self, container: &Container, image: &str, pulls: &mut Pulls) -> NotReady {
        if pulls.reported_missing.insert(container.name.clone()) {
            let message = format!(
                "failed to pull and unpack image {image:?}: not found (this node pulls only from the registries of \
                 its --registry-certs; build the image here with `make images`)"
            );
            ("ErrImagePull", message)
        } else {
            ("ImagePullBackOff", format!("Back-off pulling image {image:?}"))
        }
    }
}
