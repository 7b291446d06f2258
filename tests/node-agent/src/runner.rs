//! One Pod on this node: its containers as processes, restarts by its
//! restartPolicy, httpGet probes, and the status it reports.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::agent::{MAX_GRACE, fail_pod, finalize_deletion, key_of, patch_status};
use crate::container::{self, ContainerFiles, Sandbox};
use crate::credentials::{self, ApiServer};
use crate::image::{Image, ImageError, ImageStore};
use crate::probe::{ProbeState, Verdict};
use crate::services::ServiceDirectory;

mod images;
mod init;

/// How a container starts: a mapped test double, or its image.
enum Launch {
    Binary(PathBuf),
    Image(std::sync::Arc<Image>),
}

/// What one container is doing, as reported in `containerStatuses`.
struct ContainerRun {
    status: ContainerStatus,
    pgid: Option<i32>,
    done: bool,
    exit_code: i32,
    readiness: Option<ProbeState>,
    liveness: Option<ProbeState>,
}

pub struct PodRunner {
    pub pod_ip: Ipv4Addr,
    pub api_server: Option<ApiServer>,
    /// Services to name in the Pod's `/etc/hosts` (when the agent runs as root).
    pub services: Option<ServiceDirectory>,
    pub client: kube::Client,
    /// Test doubles: image names mapped to host binaries.
    pub images: Vec<(String, PathBuf)>,
    /// Pulls from the registries this node reaches (when the agent runs as root).
    pub puller: Option<std::sync::Arc<crate::pull::Puller>>,
    /// Every other image, from podman's store (when the agent runs as root).
    pub image_store: Option<std::sync::Arc<ImageStore>>,
    pub dir: PathBuf,
    pub pod: Pod,
}

impl PodRunner {
    pub async fn run(self, mut stop_rx: watch::Receiver<Option<Duration>>) {
        let spec = self.pod.spec.clone().unwrap_or_default();
        if let Err(err) = std::fs::create_dir_all(&self.dir) {
            return fail_pod(
                &self.client,
                &self.pod,
                "StartError",
                &format!("creating {}: {err}", self.dir.display()),
            )
            .await;
        }
        let mut sandbox = Sandbox {
            pod_ip: self.pod_ip,
            env: Vec::new(),
            mounts: Vec::new(),
            volumes: Default::default(),
            secrets: Default::default(),
        };
        // A Secret, ConfigMap or key the Pod needs and cannot have: Pending,
        // each container waiting with `CreateContainerConfigError`, tried
        // again every few seconds (it may be created), as a kubelet does.
        let mut reported: Option<String> = None;
        loop {
            let config = match crate::volumes::env_sources(&self.client, &self.pod).await {
                Ok(secrets) => crate::volumes::prepare(&self.client, &self.pod, &self.dir)
                    .await
                    .map(|volumes| (secrets, volumes)),
                Err(message) => Err(message),
            };
            match config {
                Ok((secrets, volumes)) => {
                    sandbox.secrets = secrets;
                    sandbox.volumes = volumes;
                    break;
                }
                Err(message) => {
                    if reported.as_ref() != Some(&message) {
                        tracing::warn!(pod = %key_of(&self.pod), problem = %message, "waiting for its configuration");
                        self.report_waiting("CreateContainerConfigError", &message).await;
                        reported = Some(message);
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(3)) => {}
                        _ = stop_rx.changed() => return finalize_deletion(&self.client, &self.pod).await,
                    }
                }
            }
        }
        if let Some(services) = &self.services {
            let hosts = self.dir.join("hosts");
            let namespace = self.pod.metadata.namespace.as_deref().unwrap_or("default");
            let hostname = self.pod.metadata.name.as_deref().unwrap_or("pod");
            if let Err(err) = std::fs::write(&hosts, services.hosts(namespace, hostname, self.pod_ip)) {
                let message = format!("writing {}: {err}", hosts.display());
                return fail_pod(&self.client, &self.pod, "CreateContainerConfigError", &message).await;
            }
            sandbox.mounts.push((hosts, "/etc/hosts".into()));
        }
        if let Some(api_server) = &self.api_server {
            sandbox.env = api_server.service_env();
            if credentials::wants_token(&self.pod) {
                match credentials::write_service_account(&self.client, &self.pod, api_server, &self.dir).await
                {
                    Ok(dir) => sandbox.mounts.push((dir, credentials::MOUNT_PATH.into())),
                    Err(message) => {
                        return fail_pod(&self.client, &self.pod, "CreateContainerConfigError", &message)
                            .await;
                    }
                }
            }
        }
        if let Err((reason, message)) = self.run_init_containers(&sandbox).await {
            return fail_pod(&self.client, &self.pod, &reason, &message).await;
        }
        let Some(launches) = self.wait_for_images(&mut stop_rx).await else {
            return finalize_deletion(&self.client, &self.pod).await;
        };
        let restart_policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
        let start_time = Time(Timestamp::now());
        let (exit_tx, mut exit_rx) = mpsc::unbounded_channel::<(usize, i32)>();
        let mut runs: Vec<ContainerRun> = spec
            .containers
            .iter()
            .map(|c| ContainerRun {
                status: ContainerStatus {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                    image_id: String::new(),
                    ..Default::default()
                },
                pgid: None,
                done: false,
                exit_code: 0,
                readiness: None,
                liveness: None,
            })
            .collect();
        for (index, run) in runs.iter_mut().enumerate() {
            self.start_container(index, run, &exit_tx, &sandbox, &launches[index]);
        }
        self.report(&runs, &start_time).await;
        let mut probe_tick = tokio::time::interval(Duration::from_millis(500));

        loop {
            tokio::select! {
                _ = probe_tick.tick() => {
                    if self.run_probes(&mut runs).await {
                        self.report(&runs, &start_time).await;
                    }
                }
                Some((index, code)) = exit_rx.recv() => {
                    let container = &spec.containers[index];
                    let files = ContainerFiles::new(&self.dir, &container.name);
                    let run = &mut runs[index];
                    run.pgid = None;
                    let _ = std::fs::remove_file(&files.pgid);
                    let started_at = run.status.state.as_ref().and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.clone());
                    let terminated = ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: code,
                            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                            message: Some(container::termination_message(container, &files, code)).filter(|m| !m.is_empty()),
                            started_at,
                            finished_at: Some(Time(Timestamp::now())),
                            container_id: run.status.container_id.clone(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    };
                    tracing::info!(pod = %key_of(&self.pod), container = %container.name, exit_code = code, "container exited");
                    let restart = match restart_policy.as_str() {
                        "Always" => true,
                        "OnFailure" => code != 0,
                        _ => false,
                    };
                    if restart {
                        run.status.last_state = Some(terminated);
                        run.status.restart_count += 1;
                        run.status.ready = false;
                        run.status.state = Some(ContainerState {
                            waiting: Some(ContainerStateWaiting { reason: Some("CrashLoopBackOff".into()), ..Default::default() }),
                            ..Default::default()
                        });
                        let backoff = Duration::from_secs(1 << run.status.restart_count.clamp(1, 4) as u32 >> 1);
                        self.report(&runs, &start_time).await;
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = stop_rx.changed() => {
                                let grace = *stop_rx.borrow();
                                return self.stop(&mut runs, &mut exit_rx, grace).await;
                            }
                        }
                        self.start_container(index, &mut runs[index], &exit_tx, &sandbox, &launches[index]);
                    } else {
                        run.status.state = Some(terminated);
                        run.status.ready = false;
                        run.done = true;
                        run.exit_code = code;
                    }
                    self.report(&runs, &start_time).await;
                    if runs.iter().all(|r| r.done) {
                        return;
                    }
                }
                _ = stop_rx.changed() => {
                    let grace = *stop_rx.borrow();
                    return self.stop(&mut runs, &mut exit_rx, grace).await;
                }
            }
        }
    }

    fn start_container(
        &self,
        index: usize,
        run: &mut ContainerRun,
        exit_tx: &mpsc::UnboundedSender<(usize, i32)>,
        sandbox: &Sandbox,
        launch: &Launch,
    ) {
        let container = &self.pod.spec.as_ref().expect("pod has a spec").containers[index];
        let files = ContainerFiles::new(&self.dir, &container.name);
        let spawned = match launch {
            Launch::Binary(path) => container::spawn(&self.pod, container, path, &files, &self.dir, sandbox),
            Launch::Image(image) => {
                crate::from_image::spawn(&self.pod, container, image, &files, &self.dir, sandbox)
            }
        };
        match spawned {
            Ok(mut child) => {
                let pid = child.id().map_or(0, |p| p as i32);
                run.pgid = Some(pid);
                let _ = std::fs::write(&files.pgid, pid.to_string());
                run.status.container_id = Some(format!("local-process://{pid}"));
                run.readiness = ProbeState::new(container.readiness_probe.as_ref(), container);
                run.liveness = ProbeState::new(container.liveness_probe.as_ref(), container);
                // Without a readiness probe a started container is ready at once.
                run.status.ready = run.readiness.is_none();
                run.status.started = Some(true);
                run.status.state = Some(ContainerState {
                    running: Some(ContainerStateRunning { started_at: Some(Time(Timestamp::now())) }),
                    ..Default::default()
                });
                tracing::info!(pod = %key_of(&self.pod), container = %container.name, pid, "container started");
                let exit_tx = exit_tx.clone();
                tokio::spawn(async move {
                    let code = match child.wait().await {
                        Ok(status) => {
                            use std::os::unix::process::ExitStatusExt;
                            status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
                        }
                        Err(_) => 255,
                    };
                    let _ = exit_tx.send((index, code));
                });
            }
            Err(err) => {
                // A real kubelet would keep such a container Waiting; failing it
                // lets the Job see the failure instead of waiting forever.
                tracing::warn!(pod = %key_of(&self.pod), container = %container.name, error = %err, "cannot start");
                run.done = true;
                run.exit_code = 128;
                run.status.state = Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 128,
                        reason: Some(err.reason().into()),
                        message: Some(err.to_string()),
                        finished_at: Some(Time(Timestamp::now())),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
        }
    }

    /// Runs the probes that are due: readiness sets `ready`, a liveness
    /// failure kills the container (its exit then restarts it). True when
    /// some container's readiness changed.
    async fn run_probes(&self, runs: &mut [ContainerRun]) -> bool {
        let mut changed = false;
        for run in runs.iter_mut().filter(|r| r.pgid.is_some()) {
            if let Some(probe) = run.readiness.as_mut() {
                let ready = match probe.tick(self.pod_ip).await {
                    Verdict::Passing => true,
                    Verdict::Failing => false,
                    Verdict::Unchanged => run.status.ready,
                };
                changed |= ready != run.status.ready;
                run.status.ready = ready;
            }
            if let Some(probe) = run.liveness.as_mut()
                && probe.tick(self.pod_ip).await == Verdict::Failing
                && let Some(pgid) = run.pgid
            {
                tracing::info!(pod = %key_of(&self.pod), container = %run.status.name, "liveness probe failed; restarting");
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
        changed
    }

    /// Writes phase, conditions and container statuses.
    async fn report(&self, runs: &[ContainerRun], start_time: &Time) {
        let all_done = runs.iter().all(|r| r.done);
        let phase = if !all_done {
            "Running"
        } else if runs.iter().all(|r| r.exit_code == 0) {
            "Succeeded"
        } else {
            "Failed"
        };
        let ready = if runs.iter().all(|r| r.status.ready) { "True" } else { "False" };
        let now = Time(Timestamp::now());
        let condition =
            |type_: &str, status: &str| json!({"type": type_, "status": status, "lastTransitionTime": now});
        let statuses: Vec<&ContainerStatus> = runs.iter().map(|r| &r.status).collect();
        let patch = json!({"status": {
            "phase": phase,
            "startTime": start_time,
            "hostIP": "127.0.0.1",
            "podIP": self.pod_ip.to_string(),
            "podIPs": [{"ip": self.pod_ip.to_string()}],
            "conditions": [
                condition("PodScheduled", "True"), condition("Initialized", "True"),
                condition("ContainersReady", ready), condition("Ready", ready),
            ],
            "containerStatuses": statuses,
        }});
        patch_status(&self.client, &self.pod, patch).await;
    }

    /// SIGTERM every process group, SIGKILL what is left after `grace`, then
    /// remove the Pod object.
    async fn stop(
        &self,
        runs: &mut [ContainerRun],
        exit_rx: &mut mpsc::UnboundedReceiver<(usize, i32)>,
        grace: Option<Duration>,
    ) {
        let grace = grace.unwrap_or(MAX_GRACE);
        let live = |runs: &[ContainerRun]| runs.iter().filter(|r| r.pgid.is_some()).count();
        for pgid in runs.iter().filter_map(|r| r.pgid) {
            let _ =
                killpg(Pid::from_raw(pgid), if grace.is_zero() { Signal::SIGKILL } else { Signal::SIGTERM });
        }
        let deadline = tokio::time::Instant::now() + grace;
        while live(runs) > 0 {
            match tokio::time::timeout_at(deadline, exit_rx.recv()).await {
                Ok(Some((index, _))) => runs[index].pgid = None,
                Ok(None) => break,
                Err(_) => {
                    for pgid in runs.iter().filter_map(|r| r.pgid) {
                        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                    }
                    // Reap what SIGKILL ended so no zombie outlives the Pod.
                    while live(runs) > 0 {
                        match tokio::time::timeout(Duration::from_secs(5), exit_rx.recv()).await {
                            Ok(Some((index, _))) => runs[index].pgid = None,
                            _ => break,
                        }
                    }
                }
            }
        }
        // Also end anything a container left behind in its group.
        for run in runs.iter() {
            if let Some(pid) =
                run.status.container_id.as_deref().and_then(|id| id.strip_prefix("local-process://"))
                && let Ok(pgid) = pid.parse()
            {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
        tracing::info!(pod = %key_of(&self.pod), "stopped");
        finalize_deletion(&self.client, &self.pod).await;
    }
}
