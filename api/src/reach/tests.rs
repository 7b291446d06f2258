use super::*;

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        verbs: strings(verbs),
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        ..Default::default()
    }
}

fn subject(kind: &str, name: &str, namespace: Option<&str>) -> Subject {
    Subject {
        kind: kind.into(),
        name: name.into(),
        namespace: namespace.map(str::to_string),
        ..Default::default()
    }
}

fn right(verb: &str, resource: &str, subresource: &str) -> Right {
    *RIGHTS
        .iter()
        .find(|r| r.verb == verb && r.resource == resource && r.subresource == subresource)
        .unwrap_or_else(|| panic!("{verb} {resource}/{subresource} is not a right of the reach"))
}

#[test]
fn rules_match_as_rbac_matches_them() {
    let status = right("patch", "toolruns", "status");
    assert!(rule_grants(&rule(&["patch"], &[crate::GROUP], &["toolruns/status"]), &status));
    assert!(rule_grants(&rule(&["*"], &["*"], &["*"]), &status));
    assert!(rule_grants(&rule(&["patch"], &[crate::GROUP], &["*/status"]), &status), "*/SUB is RBAC's");
    assert!(!rule_grants(&rule(&["patch"], &[crate::GROUP], &["toolruns"]), &status), "not the subresource");
    assert!(
        !rule_grants(&rule(&["get"], &[crate::GROUP], &["toolruns/status"]), &status),
        "reading is no reach"
    );
    assert!(!rule_grants(&rule(&["patch"], &[""], &["toolruns/status"]), &status), "another group");
    let exec = right("create", "pods", "exec");
    assert!(rule_grants(&rule(&["create"], &[""], &["pods/exec"]), &exec));
    assert!(!rule_grants(&rule(&["create"], &[""], &["pods"]), &exec));
    let mut named = rule(&["get"], &[""], &["secrets"]);
    named.resource_names = Some(vec!["one".into()]);
    assert!(!rule_grants(&named, &right("get", "secrets", "")), "named objects are no run's");
}

#[test]
fn the_edit_role_and_a_status_only_role_hold_the_reach_and_a_viewer_does_not() {
    // The rules of Kubernetes' `edit` that matter, and what red team round 5 used.
    let edit = [
        rule(
            &["create", "delete", "patch", "update"],
            &[""],
            &["pods", "pods/attach", "pods/exec", "secrets"],
        ),
        rule(&["get", "list", "watch"], &[""], &["pods/attach", "pods/exec", "secrets"]),
        rule(&["create", "patch"], &["batch"], &["jobs", "cronjobs"]),
    ];
    let status_only = [rule(&["patch"], &[crate::GROUP], &["toolruns/status"])];
    let view =
        [rule(&["get", "list", "watch"], &["", crate::GROUP], &["pods", "toolruns", "miningworkflows"])];
    let (alice, eve, vic) = (
        [subject("User", "alice", None)],
        [subject("User", "eve", None)],
        [subject("ServiceAccount", "viewer", None)],
    );
    let bindings = [
        BindingRules {
            binding: "RoleBinding w/a".into(),
            role: "ClusterRole edit".into(),
            namespace: Some("w"),
            subjects: &alice,
            rules: &edit,
        },
        BindingRules {
            binding: "RoleBinding w/e".into(),
            role: "Role s".into(),
            namespace: Some("w"),
            subjects: &eve,
            rules: &status_only,
        },
        BindingRules {
            binding: "RoleBinding w/v".into(),
            role: "ClusterRole view".into(),
            namespace: Some("w"),
            subjects: &vic,
            rules: &view,
        },
    ];
    let admins = BTreeSet::new();
    let found =
        candidates(&bindings, &Exempt { cluster_admins: &admins, product_namespace: "mining-operator" });
    let listed: Vec<(String, Vec<String>)> = found
        .iter()
        .map(|((holder, _, _), rights)| (holder.text(), rights.iter().map(Right::text).collect()))
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let alices = &listed.iter().find(|(who, _)| who == "User alice").unwrap().1;
    for wanted in ["create pods", "create pods/exec", "get secrets", "create jobs"] {
        assert!(alices.contains(&wanted.to_string()), "{wanted}: {alices:?}");
    }
    assert_eq!(listed.iter().find(|(who, _)| who == "User eve").unwrap().1, ["patch toolruns/status"]);
}

#[test]
fn admins_kubernetes_and_the_product_are_not_listed_and_everyone_groups_are() {
    let admins: BTreeSet<Holder> = [Holder::of(&subject("User", "root", None), None)].into();
    let exempt = Exempt { cluster_admins: &admins, product_namespace: "mining-operator" };
    let holder = |kind, name, namespace| Holder::of(&subject(kind, name, namespace), Some("w"));
    assert!(exempt.covers(&holder("User", "root", None)));
    assert!(exempt.covers(&holder("Group", "system:masters", None)));
    assert!(exempt.covers(&holder("User", "system:kube-scheduler", None)));
    assert!(exempt.covers(&holder("ServiceAccount", "job-controller", Some("kube-system"))));
    assert!(exempt.covers(&holder("ServiceAccount", "mining-operator", Some("mining-operator"))));
    assert!(exempt.covers(&holder("User", "system:serviceaccount:mining-operator:frontend", None)));
    for listed in [
        holder("User", "alice", None),
        holder("Group", "system:authenticated", None),
        holder("Group", "system:serviceaccounts:w", None),
        holder("ServiceAccount", "default", None),
        holder("User", "system:serviceaccount:w:default", None),
    ] {
        assert!(!exempt.covers(&listed), "{listed:?}");
    }
    assert_eq!(
        holder("ServiceAccount", "default", None).namespace.as_deref(),
        Some("w"),
        "the binding's namespace"
    );
}

#[test]
fn reviews_ask_as_the_subject_would_be_authenticated() {
    let account = Holder::of(&subject("ServiceAccount", "bot", Some("w")), None);
    let (user, groups) = account.review_identity();
    assert_eq!(user.as_deref(), Some("system:serviceaccount:w:bot"));
    assert!(groups.contains(&"system:serviceaccounts:w".to_string()));
    let (_, groups) = Holder::of(&subject("Group", "devs", None), None).review_identity();
    assert_eq!(groups, ["devs"]);
}

#[test]
fn cluster_admins_are_the_subjects_bound_to_cluster_admin() {
    let root = [subject("User", "root", None)];
    let bob = [subject("User", "bob", None)];
    let admins = cluster_admins([("cluster-admin", &root[..]), ("edit", &bob[..])]);
    assert_eq!(admins.into_iter().map(|h| h.text()).collect::<Vec<_>>(), ["User root"]);
}
