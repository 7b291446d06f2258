//! Init containers, as the kubelet runs them: each to completion, in order,
//! before the Pod's containers start; one that fails fails the Pod (the
//! agent runs Pods of `restartPolicy: Never` Jobs, and retries none).

use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::{Launch, PodRunner};
use crate::agent::{key_of, patch_status};
use crate::container::{self, ContainerFiles, Sandbox};

impl PodRunner {
    /// Runs the Pod's init containers; `Err((reason, message))` when one
    /// cannot start or ends non-zero. Their statuses are reported as each ends.
    pub(super) async fn run_init_containers(&self, sandbox: &Sandbox) -> Result<(), (String, String)> {
        let inits = self.pod.spec.as_ref().and_then(|s| s.init_containers.clone()).unwrap_or_default();
        let mut statuses: Vec<ContainerStatus> = Vec::new();
        for container in &inits {
            let image = container.image.clone().unwrap_or_default();
            // One try: an init container whose image cannot be had fails the Pod.
            let launch = self
                .launch(container, &mut super::images::Pulls::default())
                .await
                .map_err(|(reason, message)| (reason.to_string(), message))?;
            let files = ContainerFiles::new(&self.dir, &container.name);
            let spawned = match &launch {
                Launch::Binary(path) => {
                    container::spawn(&self.pod, container, path, &files, &self.dir, sandbox)
                }
                Launch::Image(image) => {
                    crate::from_image::spawn(&self.pod, container, image, &files, &self.dir, sandbox)
                }
            };
            let mut child = spawned.map_err(|err| (err.reason().to_string(), err.to_string()))?;
            let started = Time(Timestamp::now());
            let code = match child.wait().await {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
                }
                Err(_) => 255,
            };
            tracing::info!(pod = %key_of(&self.pod), container = %container.name, exit_code = code,
                "init container exited");
            statuses.push(ContainerStatus {
                name: container.name.clone(),
                image: image.clone(),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code,
                        reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                        message: Some(container::termination_message(container, &files, code))
                            .filter(|m| !m.is_empty()),
                        started_at: Some(started),
                        finished_at: Some(Time(Timestamp::now())),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
            patch_status(&self.client, &self.pod, json!({"status": {"initContainerStatuses": statuses}}))
                .await;
            if code != 0 {
                let message = format!("init container {:?} exited with {code}", container.name);
                return Err(("Init:Error".into(), message));
            }
        }
        Ok(())
    }
}
