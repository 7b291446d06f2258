//! The audit's reads and reviews: thin, the decisions are the parent's.

use std::collections::HashMap;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde::Serialize;

use super::{BindingRules, Exempt, Finding, Holder, Right, candidates, cluster_admins};

/// At most this many SubjectAccessReviews per audit: past it the report
/// says it is incomplete rather than load the API server without end.
pub const MAX_REVIEWS: usize = 2_000;

/// What one audit found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The workflow namespace audited.
    pub namespace: String,
    /// Every subject holding the reach there, by binding; none on a default install.
    pub findings: Vec<Finding>,
    /// False when [`MAX_REVIEWS`] cut the confirmation short.
    pub complete: bool,
}

/// Lists who holds the runs of `namespace` (see the module), the product
/// being installed in `product_namespace`. Needs: list Roles and
/// RoleBindings in `namespace`, list ClusterRoles and ClusterRoleBindings,
/// create SubjectAccessReviews.
pub async fn audit(client: &Client, namespace: &str, product_namespace: &str) -> Result<Report, kube::Error> {
    let all = ListParams::default();
    let role_bindings = Api::<RoleBinding>::namespaced(client.clone(), namespace).list(&all).await?.items;
    let cluster_bindings = Api::<ClusterRoleBinding>::all(client.clone()).list(&all).await?.items;
    let roles =
        rules_by_name(Api::<Role>::namespaced(client.clone(), namespace), |r| (r.metadata.name, r.rules));
    // An aggregated ClusterRole's rules are filled in by the control plane.
    let cluster_roles =
        rules_by_name(Api::<ClusterRole>::all(client.clone()), |r| (r.metadata.name, r.rules));
    let (roles, cluster_roles) = (roles.await?, cluster_roles.await?);
    let rules_of = |kind: &str, name: &str| -> &[PolicyRule] {
        match kind {
            "Role" => roles.get(name),
            "ClusterRole" => cluster_roles.get(name),
            _ => None,
        }
        .map_or(&[], Vec::as_slice)
    };
    let admins = cluster_admins(
        cluster_bindings
            .iter()
            .filter(|b| b.role_ref.kind == "ClusterRole")
            .map(|b| (b.role_ref.name.as_str(), b.subjects.as_deref().unwrap_or_default())),
    );
    let mut bindings: Vec<BindingRules<'_>> = Vec::new();
    for binding in &role_bindings {
        let name = binding.metadata.name.as_deref().unwrap_or_default();
        bindings.push(BindingRules {
            binding: format!("RoleBinding {namespace}/{name}"),
            role: format!("{} {}", binding.role_ref.kind, binding.role_ref.name),
            namespace: Some(namespace),
            subjects: binding.subjects.as_deref().unwrap_or_default(),
            rules: rules_of(&binding.role_ref.kind, &binding.role_ref.name),
        });
    }
    for binding in &cluster_bindings {
        let name = binding.metadata.name.as_deref().unwrap_or_default();
        bindings.push(BindingRules {
            binding: format!("ClusterRoleBinding {name}"),
            role: format!("ClusterRole {}", binding.role_ref.name),
            namespace: None,
            subjects: binding.subjects.as_deref().unwrap_or_default(),
            rules: rules_of("ClusterRole", &binding.role_ref.name),
        });
    }
    let exempt = Exempt { cluster_admins: &admins, product_namespace };
    let mut verdicts: HashMap<(Holder, Right), bool> = HashMap::new();
    let (mut findings, mut complete) = (Vec::new(), true);
    'bindings: for ((holder, binding, role), mut rights) in candidates(&bindings, &exempt) {
        rights.sort();
        rights.dedup();
        let mut confirmed = Vec::new();
        for right in rights {
            let key = (holder.clone(), right);
            let allowed = match verdicts.get(&key) {
                Some(allowed) => *allowed,
                None if verdicts.len() >= MAX_REVIEWS => {
                    complete = false;
                    break 'bindings;
                }
                None => {
                    let allowed = review(client, namespace, &holder, &right).await?;
                    verdicts.insert(key, allowed);
                    allowed
                }
            };
            if allowed {
                confirmed.push(right.text());
            }
        }
        if !confirmed.is_empty() {
            findings.push(Finding {
                subject: holder,
                binding: binding.into(),
                role: role.into(),
                rights: confirmed,
            });
        }
    }
    Ok(Report { namespace: namespace.into(), findings, complete })
}

/// Every object of `api` (Roles or ClusterRoles) by name, with its rules
/// (`parts` takes them out).
async fn rules_by_name<K>(
    api: Api<K>,
    parts: impl Fn(K) -> (Option<String>, Option<Vec<PolicyRule>>),
) -> Result<HashMap<String, Vec<PolicyRule>>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let listed = api.list(&ListParams::default()).await?.items;
    Ok(listed
        .into_iter()
        .map(parts)
        .map(|(name, rules)| (name.unwrap_or_default(), rules.unwrap_or_default()))
        .collect())
}

/// Whether the API server's authorizers allow `holder` `right` in `namespace`.
async fn review(
    client: &Client,
    namespace: &str,
    holder: &Holder,
    right: &Right,
) -> Result<bool, kube::Error> {
    let (user, groups) = holder.review_identity();
    let attributes = ResourceAttributes {
        namespace: Some(namespace.into()),
        verb: Some(right.verb.into()),
        group: Some(right.group.into()),
        resource: Some(right.resource.into()),
        subresource: (!right.subresource.is_empty()).then(|| right.subresource.into()),
        ..Default::default()
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user,
            groups: Some(groups),
            resource_attributes: Some(attributes),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer =
        Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}
