//! Who holds every caller's runs in a workflow namespace ("the reach").
//!
//! Kubernetes gives whoever may create Pods in a namespace (directly or
//! through a workload), exec or attach into them, or read or write its
//! Secrets every Secret and ServiceAccount there; whoever may write
//! `toolruns/status` or `miningworkflows/status` there can tell a caller
//! anything about its run. No defence of ours can take that away
//! (docs/SECURITY.md), so it is made visible: [`audit`] lists every subject
//! outside the cluster's admins, Kubernetes' own components and the
//! product's own accounts that holds any of [`RIGHTS`] there, with the
//! right and the binding it holds it through, each confirmed by a
//! SubjectAccessReview. `kubectl mining audit` prints it; the frontend
//! runs it periodically and warns when the set changes.
//!
//! The decisions (which rule grants which right, who is exempt) are pure
//! functions; [`audit`] is the thin part that reads RBAC and asks.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
use serde::Serialize;

/// One right that is part of the reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Right {
    pub verb: &'static str,
    /// The API group ("" for the core group).
    pub group: &'static str,
    pub resource: &'static str,
    /// "" for none.
    pub subresource: &'static str,
}

impl Right {
    const fn new(verb: &'static str, group: &'static str, resource: &'static str) -> Self {
        Self { verb, group, resource, subresource: "" }
    }

    const fn sub(verb: &'static str, group: &'static str, resource: &'static str, sub: &'static str) -> Self {
        Self { verb, group, resource, subresource: sub }
    }

    /// As people write it: `create pods`, `patch toolruns/status`.
    pub fn text(&self) -> String {
        match self.subresource {
            "" => format!("{} {}", self.verb, self.resource),
            sub => format!("{} {}/{sub}", self.verb, self.resource),
        }
    }
}

const WORKLOADS: [(&str, &str); 7] = [
    ("", "pods"),
    ("", "replicationcontrollers"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
];

/// Every right that holds the namespace's runs: making Pods (directly, or
/// by making or changing a workload or CronJob that makes them), adding
/// a container to a running Pod, exec or attach, Secrets read or written,
/// and the status of both kinds of work written.
pub const RIGHTS: &[Right] = &[
    Right::new("create", "", "pods"),
    Right::sub("patch", "", "pods", "ephemeralcontainers"),
    Right::sub("update", "", "pods", "ephemeralcontainers"),
    Right::sub("create", "", "pods", "exec"),
    Right::sub("get", "", "pods", "exec"),
    Right::sub("create", "", "pods", "attach"),
    Right::sub("get", "", "pods", "attach"),
    Right::new("create", WORKLOADS[1].0, WORKLOADS[1].1),
    Right::new("patch", WORKLOADS[1].0, WORKLOADS[1].1),
    Right::new("create", WORKLOADS[2].0, WORKLOADS[2].1),
    Right::new("patch", WORKLOADS[2].0, WORKLOADS[2].1),
    Right::new("create", WORKLOADS[3].0, WORKLOADS[3].1),
    Right::new("patch", WORKLOADS[3].0, WORKLOADS[3].1),
    Right::new("create", WORKLOADS[4].0, WORKLOADS[4].1),
    Right::new("patch", WORKLOADS[4].0, WORKLOADS[4].1),
    Right::new("create", WORKLOADS[5].0, WORKLOADS[5].1),
    Right::new("patch", WORKLOADS[5].0, WORKLOADS[5].1),
    Right::new("create", WORKLOADS[6].0, WORKLOADS[6].1),
    Right::new("patch", WORKLOADS[6].0, WORKLOADS[6].1),
    Right::new("create", "batch", "cronjobs"),
    Right::new("patch", "batch", "cronjobs"),
    Right::new("get", "", "secrets"),
    Right::new("list", "", "secrets"),
    Right::new("watch", "", "secrets"),
    Right::new("create", "", "secrets"),
    Right::new("update", "", "secrets"),
    Right::new("patch", "", "secrets"),
    Right::sub("update", crate::GROUP, "toolruns", "status"),
    Right::sub("patch", crate::GROUP, "toolruns", "status"),
    Right::sub("update", crate::GROUP, "miningworkflows", "status"),
    Right::sub("patch", crate::GROUP, "miningworkflows", "status"),
];

/// Whether `rule` grants `right` on every object of its kind in a
/// namespace, as Kubernetes' RBAC matches rules (`*` anywhere; `*/SUB` for
/// a subresource of any resource). A rule limited to named objects grants
/// no run's objects (their names are made when the run is).
pub fn rule_grants(rule: &PolicyRule, right: &Right) -> bool {
    let has = |list: &[String], want: &str| list.iter().any(|item| item == "*" || item == want);
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    let resource_matches = resources.iter().any(|item| match right.subresource {
        "" => item == "*" || item == right.resource,
        sub => item == "*" || *item == format!("{}/{sub}", right.resource) || *item == format!("*/{sub}"),
    });
    has(&rule.verbs, right.verb)
        && has(groups, right.group)
        && resource_matches
        && rule.resource_names.as_ref().is_none_or(Vec::is_empty)
}

/// A subject as the report names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Holder {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl Holder {
    pub fn of(subject: &Subject, binding_namespace: Option<&str>) -> Self {
        let namespace = match subject.kind.as_str() {
            // A ServiceAccount subject without a namespace is the binding's.
            "ServiceAccount" => subject.namespace.clone().or_else(|| binding_namespace.map(str::to_string)),
            _ => None,
        };
        Self { kind: subject.kind.clone(), name: subject.name.clone(), namespace }
    }

    /// As people write it: `User alice`, `ServiceAccount ns/name`.
    pub fn text(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{} {namespace}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// The user and groups a SubjectAccessReview asks for.
    pub fn review_identity(&self) -> (Option<String>, Vec<String>) {
        match (self.kind.as_str(), &self.namespace) {
            ("ServiceAccount", Some(namespace)) => (
                Some(format!("system:serviceaccount:{namespace}:{}", self.name)),
                vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}")],
            ),
            ("Group", _) => (Some("mining-audit:a-member".into()), vec![self.name.clone()]),
            _ => (Some(self.name.clone()), Vec::new()),
        }
    }
}

/// Whoever the audit does not list: the cluster's admins (bound to
/// `cluster-admin` cluster-wide, or in `system:masters`), Kubernetes' own
/// components (`system:` users and groups other than the groups of every
/// authenticated user, anonymous user or ServiceAccount; ServiceAccounts of
/// `kube-system`) and the product's own accounts (every ServiceAccount of
/// the namespace it is installed in).
pub struct Exempt<'a> {
    pub cluster_admins: &'a BTreeSet<Holder>,
    pub product_namespace: &'a str,
}

/// Groups that hold people and workloads, not a component: a right bound
/// to one of them is everyone's.
const EVERYONE: [&str; 3] = ["system:authenticated", "system:unauthenticated", "system:serviceaccounts"];

impl Exempt<'_> {
    pub fn covers(&self, holder: &Holder) -> bool {
        if self.cluster_admins.contains(holder) {
            return true;
        }
        match holder.kind.as_str() {
            "ServiceAccount" => {
                let namespace = holder.namespace.as_deref().unwrap_or_default();
                namespace == "kube-system" || namespace == self.product_namespace
            }
            "Group" if holder.name == "system:masters" => true,
            "Group" if EVERYONE.contains(&holder.name.as_str()) => false,
            "Group" if holder.name.starts_with("system:serviceaccounts:") => false,
            // `system:serviceaccount:NS:NAME` written as a user is that account.
            "User" if holder.name.starts_with("system:serviceaccount:") => {
                let mut parts = holder.name.splitn(4, ':').skip(2);
                let namespace = parts.next().unwrap_or_default();
                namespace == "kube-system" || namespace == self.product_namespace
            }
            _ => holder.name.starts_with("system:"),
        }
    }
}

/// One binding as the audit reads it: where its subjects get which rules.
pub struct BindingRules<'a> {
    /// `RoleBinding NS/NAME` or `ClusterRoleBinding NAME`.
    pub binding: String,
    /// `Role NAME` or `ClusterRole NAME`.
    pub role: String,
    pub namespace: Option<&'a str>,
    pub subjects: &'a [Subject],
    pub rules: &'a [PolicyRule],
}

/// One subject holding the reach through one binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub subject: Holder,
    pub binding: String,
    pub role: String,
    /// The rights it grants that a review confirmed, as people write them.
    pub rights: Vec<String>,
}

/// The rights each non-exempt subject of `bindings` would hold by their
/// rules, to be confirmed (pure).
pub fn candidates<'a>(
    bindings: &'a [BindingRules<'a>],
    exempt: &Exempt<'_>,
) -> BTreeMap<(Holder, &'a str, &'a str), Vec<Right>> {
    let mut found: BTreeMap<(Holder, &str, &str), Vec<Right>> = BTreeMap::new();
    for binding in bindings {
        let rights: Vec<Right> = RIGHTS
            .iter()
            .filter(|right| binding.rules.iter().any(|rule| rule_grants(rule, right)))
            .copied()
            .collect();
        if rights.is_empty() {
            continue;
        }
        for subject in binding.subjects {
            let holder = Holder::of(subject, binding.namespace);
            if exempt.covers(&holder) {
                continue;
            }
            found
                .entry((holder, &binding.binding, &binding.role))
                .or_default()
                .extend(rights.iter().copied());
        }
    }
    found
}

/// The subjects bound to `cluster-admin` cluster-wide (pure).
pub fn cluster_admins<'a>(bindings: impl IntoIterator<Item = (&'a str, &'a [Subject])>) -> BTreeSet<Holder> {
    bindings
        .into_iter()
        .filter(|(role, _)| *role == "cluster-admin")
        .flat_map(|(_, subjects)| subjects.iter().map(|subject| Holder::of(subject, None)))
        .collect()
}

#[cfg(feature = "audit")]
mod io;
#[cfg(feature = "audit")]
pub use io::{MAX_REVIEWS, Report, audit};

#[cfg(test)]
mod tests;
