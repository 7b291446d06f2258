//! Outputs live and die with their run: what no run keeps is deleted — a
//! run gone (deleted, expired), a run that ended without success (failed,
//! cancelled), and files a succeeded run did not record. The reconcile
//! deletes them as it ends or deletes a run; this sweep catches the rest
//! (a run deleted by hand, a restart in between) and recounts the bytes
//! stored.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use kube::runtime::reflector::Store;
use mining_api::{ToolRun, ToolRunPhase, Work as _};
use object_store::path::Path;

use super::Outputs;
use crate::leader::Leadership;

/// What the store may keep of one run's files.
#[derive(Debug, PartialEq, Eq)]
pub enum Keep {
    /// The run runs, or waits: anything it uploaded.
    All,
    /// The run succeeded: the files its status records.
    Recorded(BTreeSet<String>),
    /// Nothing: the run is gone or ended without success.
    Nothing,
}

/// What may be kept of the files of `run` (pure).
pub fn keep(run: Option<&ToolRun>) -> Keep {
    match run {
        None => Keep::Nothing,
        Some(run) if !run.is_finished() => Keep::All,
        Some(run) if run.phase() == ToolRunPhase::Succeeded => {
            Keep::Recorded(run.status.iter().flat_map(|s| s.outputs.iter()).map(|o| o.name.clone()).collect())
        }
        Some(_) => Keep::Nothing,
    }
}

/// Sweeps every `every` once `runs` has listed: a store on a volume of
/// each replica (`own_disk`) on every replica, one they share (S3, one
/// claim) only while this replica leads.
pub async fn sweep_every(
    outputs: std::sync::Arc<Outputs>,
    runs: Store<ToolRun>,
    namespace: Option<String>,
    (leadership, own_disk): (Leadership, bool),
    every: Duration,
    keys: mining_api::ownership::OwnershipKeys,
) {
    if runs.wait_until_ready().await.is_err() {
        return;
    }
    let party_of = |run: &ToolRun| super::server::party_of(&keys, run);
    loop {
        if own_disk || leadership.is_leading() {
            sweep(&outputs, &runs, namespace.as_deref(), &party_of).await;
        }
        tokio::time::sleep(every).await;
    }
}

/// One sweep: deletes what no run keeps; recounts what is kept, in all
/// and for each party (`party_of`).
pub async fn sweep(
    outputs: &Outputs,
    runs: &Store<ToolRun>,
    namespace: Option<&str>,
    party_of: &(dyn Fn(&ToolRun) -> String + Sync),
) {
    let state = runs.state();
    let by_uid: HashMap<(&str, &str), &ToolRun> = state
        .iter()
        .filter_map(|run| Some(((run.metadata.namespace.as_deref()?, run.metadata.uid.as_deref()?), &**run)))
        .collect();
    let store = outputs.store().clone();
    let namespaces = match namespace {
        Some(ns) => vec![ns.to_string()],
        None => children(&store, &Path::from("runs")).await,
    };
    let mut kept = 0;
    let mut by_party: HashMap<String, u64> = HashMap::new();
    for ns in namespaces {
        for uid in children(&store, &Path::from(format!("runs/{ns}"))).await {
            let prefix = Path::from(mining_api::tool_outputs::run_prefix(&ns, &uid));
            let run = by_uid.get(&(ns.as_str(), uid.as_str())).copied();
            let kept_of_run = match keep(run) {
                Keep::All => outputs.delete_where(&prefix, |_| false).await,
                Keep::Nothing => outputs.delete_where(&prefix, |_| true).await,
                Keep::Recorded(names) => {
                    outputs
                        .delete_where(&prefix, |path| path.filename().is_none_or(|f| !names.contains(f)))
                        .await
                }
            };
            kept += kept_of_run;
            if let Some(run) = run {
                *by_party.entry(party_of(run)).or_default() += kept_of_run;
            }
        }
    }
    outputs.set_used(kept);
    outputs.set_party_bytes(by_party);
}

/// The names one level under `prefix`.
async fn children(store: &std::sync::Arc<dyn object_store::ObjectStore>, prefix: &Path) -> Vec<String> {
    match store.list_with_delimiter(Some(prefix)).await {
        Ok(listed) => listed.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_owned)).collect(),
        Err(err) => {
            tracing::warn!(error = %err, prefix = %prefix, "cannot list stored outputs");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(phase: Option<ToolRunPhase>, outputs: &[&str]) -> ToolRun {
        mining_api::testing::tool_run_with_files(phase, outputs)
    }

    #[test]
    fn files_live_and_die_with_their_run() {
        assert_eq!(keep(None), Keep::Nothing);
        assert_eq!(keep(Some(&run(Some(ToolRunPhase::Running), &[]))), Keep::All);
        assert_eq!(keep(Some(&run(Some(ToolRunPhase::InputRequired), &[]))), Keep::All);
        assert_eq!(keep(Some(&run(None, &[]))), Keep::All);
        assert_eq!(
            keep(Some(&run(Some(ToolRunPhase::Succeeded), &["a.csv"]))),
            Keep::Recorded(["a.csv".to_string()].into())
        );
        for ended in [ToolRunPhase::Failed, ToolRunPhase::Cancelled] {
            assert_eq!(keep(Some(&run(Some(ended), &["a.csv"]))), Keep::Nothing);
        }
    }
}
