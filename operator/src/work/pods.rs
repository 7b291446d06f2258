//! A Job's own Pods, for every kind: those its Job made from its template
//! (the `job-name` label alone is anyone's to set), from the operator's Pod
//! watch, or read from the API server a page at a time — Pods are what
//! anyone can create, so no list of them is ever held whole.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use mining_api::admitted::Reads;

use crate::{Error, Result};

/// Pods per page: whatever size anyone made, at most this many are held at once.
pub const POD_PAGE_SIZE: u32 = 5;
/// Most Pod pages one reconcile reads (a run of 100 parts, each retried).
const MAX_POD_PAGES: usize = 100;

/// Whether `pod` is one `job` made: controlled by it and running exactly
/// its template, with what its kind's containers read (`reads`).
pub fn made_by(pod: &Pod, job: &Job, reads: Reads) -> bool {
    mining_api::provenance::is_jobs_pod(pod, job, reads)
}

/// The Pods of `job` in the Pod watch carrying its name (empty before the
/// watch's first list), whoever made them.
pub fn cached_named(store: &Store<Pod>, job: &Job) -> Vec<Arc<Pod>> {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let namespace = job.metadata.namespace.as_deref();
    store
        .state()
        .into_iter()
        .filter(|pod| {
            pod.metadata.namespace.as_deref() == namespace
                && pod.labels().get("job-name").map(String::as_str) == Some(name)
        })
        .collect()
}

/// The Pods of `job` its Job made, as the Pod watch holds them.
pub fn cached_own(store: &Store<Pod>, job: &Job, reads: Reads) -> Vec<Arc<Pod>> {
    cached_named(store, job).into_iter().filter(|pod| made_by(pod, job, reads)).collect()
}

/// Reads the Pods `job` made from the API server a page at a time, handing
/// each page's own ones to `take` before the next page is read.
pub async fn each_own_page(
    pods: &Api<Pod>,
    job: &Job,
    reads: Reads,
    mut take: impl FnMut(Vec<&Pod>),
) -> Result<()> {
    let name = job.name_any();
    let mut params = ListParams::default().labels(&format!("job-name={name}")).limit(POD_PAGE_SIZE);
    for _ in 0..MAX_POD_PAGES {
        let page =
            pods.list(&params).await.map_err(|source| Error::ListPods { job: name.clone(), source })?;
        take(page.items.iter().filter(|pod| made_by(pod, job, reads)).collect());
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(())
}
