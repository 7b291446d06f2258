//! How the chart is reached and spread: an ingress and its host, trusted
//! proxies, replicas over nodes, disruption budgets.

use super::*;

#[test]
fn replicas_spread_over_nodes_and_labels_reach_every_object() {
    let helm = helm();
    let manifests = render(&helm, "default", &[]);
    // By default both Deployments spread their replicas by node, softly.
    assert_eq!(manifests.matches("topologyKey: kubernetes.io/hostname\n").count(), 2);
    assert_eq!(manifests.matches("whenUnsatisfiable: ScheduleAnyway\n").count(), 2);
    let off = render(&helm, "default", &["--set", "topologySpread.default=false"]);
    assert!(!off.contains("topologySpreadConstraints"));
    // A constraint of one's own gets the component's selector.
    let zoned = render(
        &helm,
        "default",
        &[
            "--set-json",
            r#"frontend.topologySpreadConstraints=[{"maxSkew":2,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule"}]"#,
        ],
    );
    let zone = "app.kubernetes.io/component: frontend\n              app.kubernetes.io/instance: release\n              \
                app.kubernetes.io/name: mining-operator\n          maxSkew: 2\n          topologyKey: zone\n";
    assert!(zoned.contains(zone), "{zoned}");
    // commonLabels on every object; podLabels on one component's Pods only.
    let labelled = render(
        &helm,
        "default",
        &["--set", "commonLabels.team=mining", "--set", "frontend.podLabels.tier=edge"],
    );
    let objects = labelled.matches("\nkind: ").count();
    assert_eq!(
        labelled.matches("team: mining\n").count(),
        objects + 2,
        "each object (the helm-test Pod too) and both Pod templates"
    );
    assert_eq!(labelled.matches("tier: edge\n").count(), 1);
}

#[test]
fn an_ingress_makes_its_host_the_public_url_and_an_allowed_host() {
    let helm = helm();
    let args = ["--set", "frontend.ingress.enabled=true", "--set", "frontend.ingress.host=mcp.example.com"];
    let tls = ["--set-json", r#"frontend.ingress.tls=[{"secretName":"mcp-tls"}]"#];
    let manifests = render(&helm, "default", &[&args[..], &tls[..]].concat());
    assert!(manifests.contains("kind: Ingress\n"));
    assert!(manifests.contains("    - host: mcp.example.com\n"));
    assert!(manifests.contains("- secretName: mcp-tls\n      hosts: [\"mcp.example.com\"]\n"), "{manifests}");
    assert!(manifests.contains("- --public-url=https://mcp.example.com/mcp\n"));
    assert!(manifests.contains(",mcp.example.com\n"), "the public host is allowed");
    // Without TLS the URL says http; a publicUrl given wins, and its host is allowed too.
    assert!(render(&helm, "default", &args).contains("- --public-url=http://mcp.example.com/mcp\n"));
    let behind_proxy =
        render(&helm, "default", &["--set", "frontend.publicUrl=https://agents.example.org:8443/mcp"]);
    assert!(behind_proxy.contains("- --public-url=https://agents.example.org:8443/mcp\n"));
    assert!(behind_proxy.contains(",agents.example.org\n"), "the public host is allowed");
}

#[test]
fn trusted_proxies_and_the_ingress_controllers_own_limits_come_from_values() {
    let helm = helm();
    let plain = render(&helm, "default", &[]);
    assert!(!plain.contains("--trusted-proxies"), "no forwarded address is believed by default");
    let proxied =
        render(&helm, "default", &["--set-json", r#"frontend.trustedProxies=["10.0.0.0/8","192.168.0.1"]"#]);
    assert!(proxied.contains("- --trusted-proxies=10.0.0.0/8,192.168.0.1\n"), "{proxied}");
    let ingress =
        ["--set", "frontend.ingress.enabled=true", "--set", "frontend.ingress.host=mcp.example.com"];
    let nginx =
        render(&helm, "default", &[&ingress[..], &["--set", "frontend.ingress.className=nginx"]].concat());
    assert!(nginx.contains("nginx.ingress.kubernetes.io/limit-connections: \"50\"\n"), "{nginx}");
    assert!(nginx.contains("nginx.ingress.kubernetes.io/limit-rps: \"20\"\n"));
    assert!(!render(&helm, "default", &ingress).contains("limit-connections"), "only for ingress-nginx");
    let refused = Command::new(&helm)
        .args(["template", "release", &chart()])
        .args(THROWAWAY_KEY)
        .args(["--set-json", r#"frontend.trustedProxies=["everyone"]"#])
        .output()
        .unwrap();
    assert!(!refused.status.success(), "a trusted proxy must be an address or a CIDR");
}

#[test]
fn a_disruption_budget_is_rendered_only_where_it_cannot_block_a_drain() {
    let helm = helm();
    assert!(render(&helm, "default", &[]).contains("kind: PodDisruptionBudget"));
    let single = render(&helm, "default", &["--set", "frontend.replicas=1"]);
    assert!(!single.contains("kind: PodDisruptionBudget"), "one replica with minAvailable 1 blocks drains");
    // With the scraper admitted, the ServiceMonitor renders.
    let monitored = render(
        &helm,
        "default",
        &[
            "--set",
            "serviceMonitor.enabled=true",
            "--set-json",
            r#"networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
        ],
    );
    assert!(
        monitored.contains("kind: ServiceMonitor")
            && monitored.contains("kubernetes.io/metadata.name: monitoring")
    );
}
