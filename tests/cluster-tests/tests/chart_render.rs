//! The Helm chart (charts/mining-operator) against the test cluster's API
//! server: it lints, renders for both namespace modes and every auth mode,
//! and everything it renders is accepted by a server-side dry run.

use std::process::Command;

use cluster_tests::helm::{chart, chart_queries, helm, metric_families};
use cluster_tests::mcp::clients_dir;
use cluster_tests::{TestNamespace, install_crd};

/// A render that cannot see the cluster makes a key only when told to.
const THROWAWAY_KEY: [&str; 2] = ["--set", "frontend.ownership.renderWithoutCluster=true"];

/// `helm template` of the chart with `args`; panics with Helm's error.
fn render(helm: &str, namespace: &str, args: &[&str]) -> String {
    let output = Command::new(helm)
        .args(["template", "release", &chart(), "--namespace", namespace, "--include-crds"])
        .args(THROWAWAY_KEY)
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "helm template {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).to_string()
}

/// `kubectl apply --dry-run=server` of `manifests`: (success, output).
fn dry_run(manifests: &str) -> (bool, String) {
    let output = cluster_tests::kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], manifests);
    (
        output.status.success(),
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)),
    )
}

#[test]
fn the_chart_lints_and_its_values_schema_refuses_bad_values() {
    let helm = helm();
    let output =
        Command::new(&helm).args(["lint", &chart(), "--strict"]).args(THROWAWAY_KEY).output().unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    for (set, expected) in [
        ("bogus=1", "additional properties 'bogus' not allowed"),
        ("frontend.replicas=many", "want integer"),
        ("frontend.auth.mode=oauth", "frontend/auth/mode"),
        ("frontend.waitBudgetSeconds=51", "frontend/waitBudgetSeconds"),
        ("operator.image.pullPolicy=Sometimes", "operator/image/pullPolicy"),
        ("operator.podStartTimeoutSeconds=0", "operator/podStartTimeoutSeconds"),
        ("imagePullSecrets[0].name=Not_A_Secret", "imagePullSecrets/0/name"),
        ("tracing.otlpEndpoint=collector:4318", "tracing/otlpEndpoint"),
        ("tracing.protocol=grpc", "tracing/protocol"),
        ("watchNamespace=Not_A_Namespace", "watchNamespace"),
        ("workflowNamespace.name=Not_A_Namespace", "workflowNamespace/name"),
        // Workflows never share the release namespace with the trust roots.
        ("watchNamespace=default", "cannot live in the release namespace default"),
        ("workflowNamespace.name=default", "cannot live in the release namespace default"),
        ("watchNamespace=a,workflowNamespace.name=b", "the operator would never see the workflows"),
        ("callerNamespace.name=default-workflows", "cannot live in the workflow namespace"),
        ("workflowNamespace.podSecurity=lax", "workflowNamespace/podSecurity"),
        ("frontend.auth.mode=tokens", "frontend.auth.tokens (or frontend.auth.existingSecret) is needed"),
        (
            "operator.leaderElection.enabled=false",
            "operator.replicas > 1 needs operator.leaderElection.enabled",
        ),
        ("operator.leaderElection.leaseSeconds=1", "operator/leaderElection/leaseSeconds"),
        // auth mode oidc needs an issuer and an audience, an https issuer
        // (http only on loopback), and asymmetric algorithms.
        ("frontend.auth.mode=oidc", "frontend/auth/oidc"),
        ("frontend.auth.oidc.issuer=http://idp.example.com", "frontend/auth/oidc/issuer"),
        ("frontend.auth.oidc.algorithms={HS256}", "frontend/auth/oidc/algorithms"),
        ("frontend.auth.oidc.scopes={a\"b}", "frontend/auth/oidc/scopes"),
        // User classes stop at 10^9; above is the system's.
        ("priorityClass.value=2000000000", "priorityClass/value"),
        ("priorityClass.preemptionPolicy=Always", "priorityClass/preemptionPolicy"),
        // Digests are sha256, registries host names; resources quantities.
        ("frontend.image.digest=latest", "frontend/image/digest"),
        ("global.imageRegistry=https://mirror", "global/imageRegistry"),
        ("operator.minerResources.requests.cpu=lots", "operator/minerResources/requests/cpu"),
        // Scrapes the default NetworkPolicy would silently block.
        ("serviceMonitor.enabled=true", "Set networkPolicy.metricsFrom to your Prometheus"),
        ("frontend.ingress.enabled=true", "frontend.ingress.enabled needs frontend.ingress.host"),
        ("frontend.ingress.host=https://mcp.example.com", "frontend/ingress/host"),
    ] {
        let output = Command::new(&helm)
            .args(["template", "r", &chart(), "--set", set])
            .args(THROWAWAY_KEY)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "--set {set} was accepted");
        assert!(stderr.contains(expected), "--set {set}: {stderr}");
    }
}

#[test]
fn a_render_that_cannot_see_the_cluster_never_makes_a_new_ownership_key() {
    // GitOps renders (helm template, Argo CD, Flux): a new key on every
    // render would hide every workflow signed before.
    let output = Command::new(helm()).args(["template", "release", &chart()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a key was rendered without the cluster");
    assert!(stderr.contains("frontend.ownership.existingSecret"), "{stderr}");
    // An existing Secret renders, and no key of the chart's own.
    let output = Command::new(helm())
        .args(["template", "release", &chart(), "--set", "frontend.ownership.existingSecret=mine"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let manifests = String::from_utf8_lossy(&output.stdout);
    assert!(!manifests.contains("current:"), "a key beside the existing Secret");
    assert!(manifests.contains("secretName: mine"), "the frontend does not mount the existing Secret");
}

#[test]
fn the_default_install_is_the_secure_one() {
    let output =
        Command::new(helm()).args(["template", "release", &chart()]).args(THROWAWAY_KEY).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let manifests = String::from_utf8_lossy(&output.stdout);
    for expected in [
        // Callers authenticate with tokens minted for the frontend alone.
        "- --auth=kubernetes\n",
        "- --token-audiences=mining-operator\n",
        "audience: mining-operator\n",
        // Ingress is restricted, and metrics and probes have a port of their own.
        "kind: NetworkPolicy\n",
        "- --metrics-listen=0.0.0.0:9090\n",
        "httpGet: {path: /readyz, port: metrics}",
        // Every quota and connection bound is set.
        "- --max-starts-per-minute=10\n",
        "- --max-waits-per-caller=16\n",
        "- --max-listens-per-caller=8\n",
        "- --max-connections=1000\n",
        "- --header-read-timeout-seconds=10\n",
        // It says when no operator leads, reading only the operator's Lease.
        "- --operator-lease=default/release-mining-operator-operator\n",
        "resourceNames: [\"release-mining-operator-operator\"]\n",
        // Workflows in a namespace of their own; ledgers beside the other trust roots.
        "kind: Namespace\nmetadata:\n  name: default-workflows\n",
        "- --namespace=default-workflows\n",
        "- --ledger-namespace=default\n",
        // Tool authors' Pods may not take the node; callers live where no tool Pod runs.
        "pod-security.kubernetes.io/enforce: restricted\n",
        "kind: Namespace\nmetadata:\n  name: default-callers\n",
        "resources: [\"miningledgers\"]\n    verbs: [\"create\", \"get\", \"update\"]\n",
    ] {
        assert!(manifests.contains(expected), "the default install lacks {expected:?}");
    }
    // The frontend may read the operator's leader Lease and write no Lease at
    // all: whoever runs as the frontend cannot hold the leader Lease.
    for document in manifests.split("\n---\n") {
        let frontend_role =
            document.contains("kind: Role\n") && document.contains("app.kubernetes.io/component: frontend\n");
        if frontend_role && document.contains("resources: [\"leases\"]") {
            assert!(document.contains("verbs: [\"get\"]"), "{document}");
            assert!(!document.contains("update") && !document.contains("create"), "{document}");
        }
    }
    // No browser origin is allowed unless one is configured.
    assert!(!manifests.contains("--allowed-origins"));
    // The helm-test account and its binding go whether the test passes or fails.
    assert_eq!(
        manifests
            .matches("helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded,hook-failed")
            .count(),
        2
    );
}

#[test]
fn tools_get_their_crds_a_tool_author_role_and_no_caller_reads_runs() {
    let manifests = render(&helm(), "default", &[]);
    for crd in ["name: mcptools.mining-operator.dev\n", "name: toolruns.mining-operator.dev\n"] {
        assert!(manifests.contains(crd), "the chart lacks {crd:?}");
    }
    let documents: Vec<&str> = manifests.split("\n---\n").collect();
    let author = documents
        .iter()
        .find(|d| d.contains("name: release-mining-operator-tool-author\n"))
        .expect("a tool-author ClusterRole");
    assert!(author.contains("resources: [\"mcptools\"]"), "{author}");
    assert!(!author.contains("aggregate-to"), "running Pods is no built-in role's right: {author}");
    // ToolRuns hold callers' arguments: no aggregated role reads them.
    for document in documents.iter().filter(|d| d.contains("aggregate-to-")) {
        assert!(!document.contains("toolruns"), "{document}");
    }
    // The frontend creates runs and reads tools; it never writes a tool.
    let frontend = documents
        .iter()
        .find(|d| {
            d.contains("kind: Role\n") && d.contains("\"toolruns\"") && d.contains("component: frontend")
        })
        .expect("the frontend's Role covers tool runs");
    assert!(
        frontend.contains("resources: [\"mcptools\"]\n    verbs: [\"get\", \"list\", \"watch\"]"),
        "{frontend}"
    );
}

#[test]
fn restricted_tools_are_granted_by_rbac_or_by_the_grants_values_never_by_the_chart() {
    let helm = helm();
    // Kubernetes mode: no role of the chart grants a restricted tool (verb
    // `call` on mcptools); admins grant each by name.
    let manifests = render(&helm, "default", &[]);
    assert!(manifests.contains("- --tool-access=open\n"), "the default");
    let roles = manifests
        .split("\n---\n")
        .filter(|d| d.contains("kind: Role\n") || d.contains("kind: ClusterRole\n"));
    for role in roles {
        assert!(
            !role.contains("\"call\"") && !role.contains("\"*\""),
            "no chart role may call restricted tools: {role}"
        );
    }
    assert!(!manifests.contains("tool-grants"));
    let strict = render(&helm, "default", &["--set", "frontend.toolAccess=restricted"]);
    assert!(strict.contains("- --tool-access=restricted\n"));
    // The other modes: the grants become a ConfigMap the frontend reads,
    // and a change rolls its Pods.
    let grants = r#"frontend.toolGrants={"deploy":{"subjects":["alice"],"groups":["ops"]}}"#;
    let tokens = ["--set", "frontend.auth.mode=tokens", "--set", "frontend.auth.tokens=t alice"];
    let listed = render(&helm, "default", &[&tokens[..], &["--set-json", grants]].concat());
    assert!(
        listed.contains(r#"grants.json: "{\"deploy\":{\"groups\":[\"ops\"],\"subjects\":[\"alice\"]}}""#),
        "{listed}"
    );
    assert!(listed.contains("- --tool-grants=/etc/mcp-frontend-tool-grants/grants.json\n"));
    assert!(listed.contains("mining-operator.dev/tool-grants: "));
    // With RBAC in charge, grants in values are a mistake, said at once.
    let output = Command::new(&helm)
        .args(["template", "release", &chart()])
        .args(THROWAWAY_KEY)
        .args(["--set-json", grants])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("grant restricted tools with RBAC"));
    // The values schema refuses a grant it cannot read.
    let output = Command::new(&helm)
        .args(["template", "release", &chart()])
        .args(THROWAWAY_KEY)
        .args(tokens)
        .args(["--set-json", r#"frontend.toolGrants={"deploy":{"subject":["alice"]}}"#])
        .output()
        .unwrap();
    assert!(!output.status.success(), "a misspelt field is refused");
}

#[test]
fn the_control_plane_is_scheduled_before_its_miners_without_evicting_them() {
    let helm = helm();
    let class_lines = |manifests: &str| -> Vec<String> {
        manifests.lines().filter(|l| l.contains("priorityClassName:")).map(|l| l.trim().to_string()).collect()
    };
    // By default: a class of the release's own, named by both Deployments,
    // that goes first but evicts no running miner.
    let manifests = render(&helm, "default", &[]);
    assert!(
        manifests.contains("kind: PriorityClass\nmetadata:\n  name: release-mining-operator-control-plane\n"),
        "{manifests}"
    );
    assert!(manifests.contains("value: 100000\nglobalDefault: false\npreemptionPolicy: Never\n"));
    assert_eq!(class_lines(&manifests), ["priorityClassName: release-mining-operator-control-plane"; 2]);
    // A class the platform owns instead, one component overridden.
    let manifests = render(
        &helm,
        "default",
        &[
            "--set",
            "priorityClass.create=false",
            "--set",
            "priorityClass.name=platform",
            "--set",
            "frontend.priorityClassName=edge",
        ],
    );
    assert!(!manifests.contains("kind: PriorityClass"));
    // Helm orders Deployments by name: the frontend's first.
    assert_eq!(class_lines(&manifests), ["priorityClassName: edge", "priorityClassName: platform"]);
    // None at all.
    let manifests = render(&helm, "default", &["--set", "priorityClass.create=false"]);
    assert!(class_lines(&manifests).is_empty() && !manifests.contains("kind: PriorityClass"));
}

#[test]
fn images_come_from_the_registry_and_digest_asked_for_and_miners_get_their_resources() {
    let helm = helm();
    let digest = format!("sha256:{}", "a".repeat(64));
    let manifests = render(
        &helm,
        "default",
        &[
            "--set",
            "global.imageRegistry=mirror.example.com:5000",
            "--set",
            &format!("frontend.image.digest={digest}"),
            "--set",
            "operator.minerResources.limits.cpu=2",
            "--set",
            "imagePullSecrets[0].name=regcred",
            "--set",
            "imagePullSecrets[1].name=mirror-pull",
        ],
    );
    // A private registry's pull secrets reach the components' Pods and the
    // miner Jobs (through the operator), each once.
    for secret in ["regcred", "mirror-pull"] {
        assert_eq!(
            manifests.matches(&format!("- --miner-image-pull-secret={secret}\n")).count(),
            1,
            "{secret}"
        );
        assert!(manifests.contains(&format!("- name: {secret}\n")), "the components pull with {secret}");
    }
    let default = render(&helm, "default", &[]);
    assert!(!default.contains("--miner-image-pull-secret"), "none unless asked for");
    // By default the project's images are this machine's, tagged with the
    // chart's appVersion (the workspace's version): no public registry's.
    let version = env!("CARGO_PKG_VERSION");
    for image in [
        format!("image: localhost/mining-operator/operator:{version}\n"),
        format!("image: localhost/mining-operator/mcp-frontend:{version}\n"),
        format!("- --miner-image=localhost/mining-operator/miner:{version}\n"),
    ] {
        assert!(default.contains(&image), "no {image:?}");
    }
    assert!(!default.contains("image: mining-operator/") && !default.contains("docker.io/mining-operator"));
    // Every image, the miner image the operator passes to its Jobs included.
    for image in [
        format!("image: mirror.example.com:5000/mining-operator/mcp-frontend@{digest}\n"),
        format!("image: mirror.example.com:5000/mining-operator/operator:{version}\n"),
        format!("- --miner-image=mirror.example.com:5000/mining-operator/miner:{version}\n"),
        "image: mirror.example.com:5000/curlimages/curl:8.11.1\n".to_string(),
    ] {
        assert!(manifests.contains(&image), "no {image:?}");
    }
    for flag in [
        "--job-cpu-request=100m",
        "--job-cpu-limit=2",
        "--job-memory-request=16Mi",
        "--job-memory-limit=64Mi",
    ] {
        assert!(manifests.contains(&format!("- {flag}\n")), "no {flag}");
    }
}

#[test]
fn runs_files_are_kept_in_the_embedded_store_by_default_or_in_s3_and_both_components_find_it() {
    let helm = helm();
    let url = "http://release-mining-operator-operator-outputs.default.svc:8082";
    let embedded = render(&helm, "default", &[]);
    for expected in [
        "- --outputs-store=file:///var/lib/mining-operator/outputs\n".to_string(),
        format!("- --outputs-url={url}\n"),
        "- --outputs-max-file-bytes=67108864\n".into(),
        // Only the leader, whose volume holds the files, stands behind the Service.
        "mining-operator.dev/outputs-leader: \"true\"\n".into(),
        "emptyDir:\n            sizeLimit: 4Gi\n".into(),
    ] {
        assert!(embedded.contains(&expected), "the default install lacks {expected:?}");
    }
    // The frontend reads through the operator: the same URL, and no store credentials.
    assert_eq!(embedded.matches(&format!("- --outputs-url={url}\n")).count(), 2);
    let s3 = render(
        &helm,
        "default",
        &[
            "--set",
            "outputs.store=s3",
            "--set",
            "outputs.s3.bucket=runs",
            "--set",
            "outputs.s3.endpoint=http://minio.storage:9000",
            "--set",
            "outputs.s3.existingSecret=s3-creds",
        ],
    );
    assert!(s3.contains("- --outputs-store=s3://runs/tool-outputs\n"), "{s3}");
    assert!(s3.contains("secretRef:\n                name: s3-creds\n"));
    assert!(s3.contains("value: \"http://minio.storage:9000\""));
    assert!(!s3.contains("mining-operator.dev/outputs-leader"), "every replica serves a shared store");
    assert_eq!(s3.matches("AWS_ACCESS_KEY_ID").count(), 0, "credentials only from the Secret");
    let none = render(&helm, "default", &["--set", "outputs.store=none"]);
    assert!(!none.contains("--outputs-"), "no store, no flag");
}

#[tokio::test]
async fn every_rendering_is_accepted_by_the_api_server_in_both_namespace_modes() {
    let ns = TestNamespace::new("chart").await;
    // The workflow namespace: a dry run cannot create objects in a namespace it only pretends to make.
    let work = TestNamespace::new("chart-work").await;
    install_crd(&ns.client).await;
    let helm = helm();
    let version = ns.client.apiserver_version().await.unwrap();
    let kube_version = format!("{}.{}.0", version.major, version.minor.trim_end_matches('+'));
    let kube = ["--kube-version", kube_version.as_str()];
    let cases: [&[&str]; 6] = [
        &[],
        &["--set", &format!("watchNamespace={}", work.name), "--set", "frontend.auth.mode=kubernetes"],
        &[
            "--set",
            "frontend.auth.mode=tokens",
            "--set",
            "frontend.auth.tokens=secret alice",
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "frontend.toolAccess=restricted",
            "--set-json",
            r#"frontend.toolGrants={"deploy":{"subjects":["alice"]}}"#,
            "--set",
            "operator.jobQueueName=team-a",
        ],
        &["--set", "crds.install=false", "--set", "frontend.enabled=false"],
        &[
            "--set",
            "frontend.auth.mode=oidc",
            "--set",
            "frontend.auth.oidc.issuer=https://kubernetes.default.svc",
            "--set",
            "frontend.auth.oidc.audience=https://mcp.example.com/mcp",
            "--set",
            "frontend.auth.oidc.kubernetesKeys=true",
            "--set",
            "frontend.publicUrl=https://mcp.example.com/mcp",
        ],
        &[
            "--set",
            "commonLabels.team=mining",
            "--set",
            "frontend.podLabels.tier=edge",
            "--set-json",
            r#"operator.topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule"}]"#,
            "--set",
            "operator.minerResources.limits.cpu=2",
            "--set",
            "frontend.ingress.enabled=true",
            "--set",
            "frontend.ingress.host=mcp.example.com",
            "--set-json",
            r#"frontend.ingress.tls=[{"secretName":"mcp-tls"}]"#,
        ],
    ];
    // The helm-test Pod's ServiceAccount (auth mode kubernetes, the default)
    // is a hook created just before it; a dry run of both at once would not
    // find it.
    let created = Command::new("kubectl")
        .args(["-n", &ns.name, "create", "serviceaccount", "release-mining-operator-frontend-test"])
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    for args in cases {
        let workflows = format!("workflowNamespace.name={}", work.name);
        let named = if args.iter().any(|a| a.starts_with("watchNamespace=")) {
            &[][..]
        } else {
            &["--set", workflows.as_str()][..]
        };
        let manifests = render(&helm, &ns.name, &[&kube[..], named, args].concat());
        // Security by default: every container passes the restricted profile.
        assert_eq!(
            manifests.matches("readOnlyRootFilesystem: true").count(),
            manifests.matches("image: ").count(),
            "{args:?}: a container without the restricted security context"
        );
        assert!(!manifests.contains("privileged: true"));
        let (ok, output) = dry_run(&manifests);
        assert!(ok, "{args:?}: the API server refused the chart:\n{output}");
        // Least privilege: with watchNamespace the operator's rights are a Role there.
        let watched = args.iter().any(|a| a.starts_with("watchNamespace="));
        let binding =
            |kind: &str| format!("kind: {kind}\nmetadata:\n  name: release-mining-operator-operator\n");
        assert!(
            manifests.contains(&binding(if watched { "RoleBinding" } else { "ClusterRoleBinding" })),
            "{args:?}"
        );
        assert!(
            !manifests.contains(&binding(if watched { "ClusterRoleBinding" } else { "RoleBinding" })),
            "{args:?}"
        );
    }
    // 1.20 has no policy/v1: the chart falls back to policy/v1beta1 there.
    let manifests = render(&helm, &ns.name, &kube);
    let expected = if version.minor.trim_end_matches('+').parse::<u32>().unwrap() >= 21 {
        "policy/v1\n"
    } else {
        "policy/v1beta1\n"
    };
    assert!(manifests.contains(&format!("apiVersion: {expected}kind: PodDisruptionBudget")), "{manifests}");
}

#[path = "chart_render/names_in_docs.rs"]
mod names_in_docs;
#[path = "chart_render/observability.rs"]
mod observability;
#[path = "chart_render/overrides.rs"]
mod overrides;
#[path = "chart_render/reach.rs"]
mod reach;
#[path = "chart_render/third_party.rs"]
mod third_party;
