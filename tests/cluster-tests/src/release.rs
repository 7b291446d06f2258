//! One Helm release of the chart, installed for real into the test cluster
//! in a namespace of its own, and what tests do through it: mint a caller's
//! token, call a tool with the official Python SDK through the frontend's
//! Service, wait for a rollout.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::helm::{chart, helm, must};
use crate::mcp::{Sdk, collect, structured};
use crate::{TOKEN_AUDIENCE, TestNamespace, account_token, eventually, install_crd};

const TIMEOUT: Duration = Duration::from_secs(180);

/// One Helm release of the chart in a test namespace of its own, with its
/// workflows in a second one (as the chart requires: never beside the
/// release's trust roots).
pub struct Release {
    pub helm: String,
    pub name: String,
    /// The release namespace: the components, the ownership key, the Leases, the ledgers.
    pub ns: TestNamespace,
    /// The workflow namespace: the MCP workflows, their Jobs and Pods, the callers' bindings.
    pub work: TestNamespace,
    /// The callers' ServiceAccounts (never the workflow namespace).
    pub callers: TestNamespace,
}

impl Release {
    /// Installs (and waits for) a release whose Roles cover only its own
    /// namespaces: the operator must not reconcile other tests' workflows.
    pub async fn install(prefix: &str, values: &[&str]) -> Self {
        Self::install_with_secrets(prefix, values, &[]).await
    }

    /// [`Release::install`] with `secrets` (name, [(key, value)]) made in
    /// the release namespace first, as an administrator makes the Secrets
    /// an install's `existingSecret` values name.
    pub async fn install_with_secrets(
        prefix: &str,
        values: &[&str],
        secrets: &[(&str, &[(&str, &str)])],
    ) -> Self {
        let ns = TestNamespace::new(prefix).await;
        for (name, data) in secrets {
            let mut secret = k8s_openapi::api::core::v1::Secret::default();
            secret.metadata.name = Some((*name).to_string());
            secret.string_data = Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
            ns.api::<k8s_openapi::api::core::v1::Secret>()
                .create(&Default::default(), &secret)
                .await
                .unwrap();
        }
        let release = Self::prepare_in(ns, prefix).await;
        release.install_chart(&chart(), values, true);
        release
    }

    /// The release's namespaces (made, with the CRD installed), before any install.
    pub async fn prepare(prefix: &str) -> Self {
        let ns = TestNamespace::new(prefix).await;
        Self::prepare_in(ns, prefix).await
    }

    async fn prepare_in(ns: TestNamespace, prefix: &str) -> Self {
        let work = TestNamespace::new(&format!("{prefix}-work")).await;
        let callers = TestNamespace::new(&format!("{prefix}-callers")).await;
        install_crd(&ns.client).await;
        let name = format!("r{}", &ns.name[ns.name.len() - 5..]);
        Release { helm: helm(), name, ns, work, callers }
    }

    /// `helm install` of `chart` (a directory or an `oci://` reference) with
    /// `values`, covering only the release's own namespaces; waits for it
    /// when `wait`.
    pub fn install_chart(&self, chart: &str, values: &[&str], wait: bool) -> String {
        let watch = format!("watchNamespace={}", self.work.name);
        let caller_namespace = format!("callerNamespace.name={}", self.callers.name);
        // Pods here share the host's network namespace: each listens at its own Pod IP.
        let mut args = vec![
            "install",
            self.name.as_str(),
            chart,
            "--set",
            watch.as_str(),
            // The test made it (and deletes it).
            "--set",
            "workflowNamespace.create=false",
            "--set",
            caller_namespace.as_str(),
            "--set",
            "callerNamespace.create=false",
            "--set",
            "listenAddress=$(POD_IP)",
        ];
        args.extend(["--set", "frontend.auth.mode=kubernetes"]);
        args.extend(values);
        // The CRD exists already (other tests install it); the release adopts it.
        args.push("--take-ownership");
        if wait {
            args.extend(["--wait", "--timeout", "180s"]);
        }
        args.extend(["--namespace", self.ns.name.as_str()]);
        must(&self.helm, &args)
    }

    pub fn helm_in_namespace(&self, args: &[&str]) -> String {
        let chart = chart();
        let mut full = args.to_vec();
        if matches!(args[0], "install" | "upgrade") {
            full.insert(2, &chart);
            full.extend(["--wait", "--timeout", "180s"]);
        }
        full.extend(["--namespace", self.ns.name.as_str()]);
        must(&self.helm, &full)
    }

    pub fn fullname(&self) -> String {
        format!("{}-mining-operator", self.name)
    }

    pub fn frontend(&self) -> String {
        format!("{}-frontend", self.fullname())
    }

    /// The frontend's Service URL and the Host a Pod would send (its DNS name).
    pub async fn frontend_url(&self) -> (String, String) {
        let service = self.ns.api::<Service>().get(&self.frontend()).await.unwrap();
        let ip = service.spec.and_then(|s| s.cluster_ip).expect("a ClusterIP");
        (format!("http://{ip}/mcp"), format!("{}.{}.svc", self.frontend(), self.ns.name))
    }

    /// A token of a new ServiceAccount of the callers' namespace that the
    /// chart's `mcp-caller` ClusterRole is bound to in the workflow
    /// namespace: an ordinary MCP caller, made as NOTES says.
    pub async fn user_token(&self, account: &str) -> String {
        self.bound_token(&self.callers, account).await
    }

    /// A token of a new ServiceAccount of `home`, bound to the chart's
    /// `mcp-caller` ClusterRole in the workflow namespace.
    pub async fn bound_token(&self, home: &TestNamespace, account: &str) -> String {
        let accounts: Api<ServiceAccount> = home.api();
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
        accounts.create(&PostParams::default(), &sa).await.unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": format!("{}-mcp-caller", self.fullname())},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": home.name}],
        }))
        .unwrap();
        self.work.api::<RoleBinding>().create(&PostParams::default(), &binding).await.unwrap();
        // As NOTES says: minted for the frontend's audience.
        account_token(&home.client, &home.name, account, Some(TOKEN_AUDIENCE)).await
    }

    /// Calls a tool with the official Python SDK through the frontend's Service.
    pub async fn call(&self, token: &str, tool: &str, arguments: Value) -> Value {
        let (url, host) = self.frontend_url().await;
        let mut command =
            Sdk::Python.command(&url, Some(token), false, &["call", tool, &arguments.to_string()]);
        command.env("MCP_HOST", host);
        collect(Sdk::Python, command.spawn().expect("start the Python client")).await
    }

    /// Reads a resource with the official Python SDK through the frontend's
    /// Service: the size and SHA-256 of each content's bytes.
    pub async fn read(&self, token: &str, uri: &str) -> Value {
        let (url, host) = self.frontend_url().await;
        let mut command = Sdk::Python.command(&url, Some(token), false, &["read", uri]);
        command.env("MCP_HOST", host);
        collect(Sdk::Python, command.spawn().expect("start the Python client")).await
    }

    /// Polls a tool run through `get_tool_result` until it is no longer running.
    pub async fn settle_tool_run(&self, token: &str, id: &str) -> Value {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            let polled =
                self.call(token, "get_tool_result", json!({"workflow_id": id, "wait_seconds": 15})).await;
            let outcome = structured(&polled).clone();
            if outcome["status"] != "running" || std::time::Instant::now() > deadline {
                return outcome;
            }
        }
    }

    /// Mines to the end: start, then get_mining_result until final.
    pub async fn mine(&self, token: &str, arguments: Value) -> Value {
        let started = self.call(token, "start_mining", arguments).await;
        let mut outcome = structured(&started).clone();
        let id = outcome["workflow_id"].as_str().expect("a workflow id").to_string();
        let deadline = std::time::Instant::now() + TIMEOUT;
        while outcome["status"] == "running" && std::time::Instant::now() < deadline {
            let polled =
                self.call(token, "get_mining_result", json!({"workflow_id": id, "wait_seconds": 15})).await;
            outcome = structured(&polled).clone();
        }
        outcome
    }

    /// Both Deployments have rolled out: every replica updated, ready and
    /// alone (no Pod of an older template is left).
    pub async fn rolled_out(&self) {
        let deployments: Api<Deployment> = self.ns.api();
        let pods: Api<Pod> = self.ns.api();
        let selector = format!("app.kubernetes.io/instance={}", self.name);
        eventually("the release's Deployments to roll out", TIMEOUT, || async {
            let listed = deployments.list(&ListParams::default().labels(&selector)).await.ok()?;
            let wanted: i32 =
                listed.items.iter().map(|d| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)).sum();
            let done = listed.items.iter().all(|d| {
                let (spec, status) = (d.spec.as_ref().unwrap(), d.status.clone().unwrap_or_default());
                let replicas = spec.replicas.unwrap_or(1);
                status.updated_replicas == Some(replicas)
                    && status.ready_replicas == Some(replicas)
                    && status.replicas == Some(replicas)
                    && status.observed_generation == d.metadata.generation
            });
            let running = pods.list(&ListParams::default().labels(&selector)).await.ok()?.items.len() as i32;
            (done && running == wanted).then_some(())
        })
        .await
    }
}

pub fn ready_addresses(endpoints: &Endpoints) -> Vec<String> {
    (endpoints.subsets.iter().flatten())
        .flat_map(|s| s.addresses.iter().flatten().map(|a| a.ip.clone()))
        .collect()
}
