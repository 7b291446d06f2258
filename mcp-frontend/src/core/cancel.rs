//! Cancelling any kind of work: one patch of `spec.cancel`, asked for once.

use kube::Api;

use super::{Any, Core, Served, View};
use crate::ids::Caller;
use crate::kube_calls;

/// What came of a cancel.
pub enum CancelOutcome<K = mining_api::MiningWorkflow> {
    /// Nothing this caller may cancel: unknown, foreign or unreadable.
    NotCancelled(View<K>),
    /// Finished before the cancel: left as it is.
    AlreadyFinished(Box<K>),
    /// A cancel was already recorded; nothing new was written.
    AlreadyRequested(Box<K>),
    /// `spec.cancel` is now set; the work as the patch returned it.
    Requested(Box<K>),
}

impl<K> CancelOutcome<K> {
    /// The same outcome of [`Any`] kind.
    pub fn into_any(self) -> CancelOutcome<Any>
    where
        Box<K>: Into<Any>,
    {
        let any = |work: Box<K>| Box::new(work.into());
        match self {
            Self::NotCancelled(view) => CancelOutcome::NotCancelled(view.into_any()),
            Self::AlreadyFinished(work) => CancelOutcome::AlreadyFinished(any(work)),
            Self::AlreadyRequested(work) => CancelOutcome::AlreadyRequested(any(work)),
            Self::Requested(work) => CancelOutcome::Requested(any(work)),
        }
    }
}

impl Core {
    /// Asks the operator to stop the caller's work `id_text` of kind `K`.
    /// The error says why the API server could not be asked.
    pub async fn cancel<K: Served>(
        &self,
        caller: &Caller,
        id_text: &str,
    ) -> Result<CancelOutcome<K>, String> {
        match self.find::<K>(caller, id_text).await? {
            View::Found(work) => self.cancel_found(caller, work).await,
            view => Ok(CancelOutcome::NotCancelled(view)),
        }
    }

    /// Asks the operator to stop `work`, which the caller was found to own.
    pub async fn cancel_found<K: Served>(
        &self,
        caller: &Caller,
        work: Box<K>,
    ) -> Result<CancelOutcome<K>, String> {
        let mut view = View::Found(work);
        // The cache may lag: a conflict means the work changed since, and
        // the decision is made once more on the version just read.
        for fresh_read in [false, true] {
            let work = match view {
                View::Found(work) => work,
                view => return Ok(CancelOutcome::NotCancelled(view)),
            };
            if work.is_finished() {
                return Ok(CancelOutcome::AlreadyFinished(work));
            }
            if work.cancel_requested() {
                return Ok(CancelOutcome::AlreadyRequested(work));
            }
            let name = work.meta().name.clone().unwrap_or_default();
            let reproof = self.keys.reproof(&*work);
            let api = self.homes::<K>().api_of(&work);
            match self.api_call("patch", kube_calls::request_cancel(api, &*work, reproof)).await {
                Ok(patched) => {
                    tracing::info!(kind = K::NOUN, name = %name, caller = %caller.name, "cancel requested");
                    return Ok(CancelOutcome::Requested(Box::new(patched)));
                }
                Err(err) if err.is_conflict() && !fresh_read => {
                    view = self.read_fresh(caller, api, &name).await?;
                }
                Err(err) => {
                    self.count_api_error("patch");
                    return Err(format!("could not cancel: {err}"));
                }
            }
        }
        Err(format!("could not cancel: the {} kept changing; try again", K::NOUN))
    }

    /// Asks the operator to stop `work` of whichever kind.
    pub async fn cancel_any(&self, caller: &Caller, work: Any) -> Result<CancelOutcome<Any>, String> {
        crate::each_kind!(work, work => self.cancel_found(caller, work).await.map(CancelOutcome::into_any))
    }

    /// The caller's work `name` as the API server has it now.
    pub(super) async fn read_fresh<K: Served>(
        &self,
        caller: &Caller,
        api: &Api<K>,
        name: &str,
    ) -> Result<View<K>, String> {
        match self.api_call("get", kube_calls::get(api, name)).await {
            Ok(Some(work)) if self.owns(&work, caller) => Ok(View::Found(Box::new(work))),
            Ok(_) => Ok(View::Missing),
            Err(err) => {
                self.count_api_error("get");
                Err(format!("cannot read the {}: {err}", K::NOUN))
            }
        }
    }
}
