//! A run's Secrets (I/O around [`super::job::arguments_secret`] and
//! [`super::job::input_secret`]): the arguments, made before its first Job,
//! and each round's answers, made when the round is answered; both checked
//! again before a result is taken.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use mining_api::tool::arguments_secret_name;
use mining_api::tool_input::input_secret_name;
use mining_api::{ToolRun, Work as _};

use super::job;
use crate::work::MANAGER;
use crate::{Error, Result};

/// The uid of the run's arguments Secret, made now or found as this
/// operator made it (a restart between the two writes); `Err(why)` when the
/// run cannot have one (the API server refuses it, or someone else's Secret
/// holds the name), which fails the run.
pub async fn ensure(
    secrets: &Api<Secret>,
    run: &ToolRun,
    outputs: Option<&crate::outputs::HandOver>,
) -> Result<std::result::Result<String, String>> {
    match job::arguments_secret(run, outputs) {
        Some(built) => ensure_secret(secrets, run, built, "arguments").await,
        None => Ok(Err("the run has no name or uid".into())),
    }
}

/// [`ensure`] for the Secret of step `step`'s answers and state.
pub async fn ensure_input(
    secrets: &Api<Secret>,
    run: &ToolRun,
    step: u32,
    data: &job::StepData,
) -> Result<std::result::Result<String, String>> {
    match job::input_secret(run, step, data) {
        Some(built) => ensure_secret(secrets, run, built, "answers").await,
        None => Ok(Err("the run has no name or uid".into())),
    }
}

async fn ensure_secret(
    secrets: &Api<Secret>,
    run: &ToolRun,
    built: Secret,
    what: &'static str,
) -> Result<std::result::Result<String, String>> {
    let name = built.metadata.name.clone().unwrap_or_default();
    let failed = |source| Error::Work {
        noun: ToolRun::NOUN,
        action: if what == "arguments" {
            "create the arguments Secret of"
        } else {
            "create the answers Secret of"
        },
        name: name.clone(),
        source,
    };
    let params = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    let stored = match secrets.create(&params, &built).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if status.code == 409 => match secrets.get_opt(&name).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(failed(kube::Error::Api(status))),
            Err(err) => return Err(failed(err)),
        },
        Err(kube::Error::Api(status)) if matches!(status.code, 400 | 403 | 422) => {
            return Ok(Err(format!("the API server refused the run's {what} Secret: {}", status.message)));
        }
        Err(err) => return Err(failed(err)),
    };
    if !job::is_secret_of(&stored, &built, run) {
        return Ok(Err(format!("a Secret named {name} exists that this run did not make")));
    }
    Ok(stored.metadata.uid.clone().ok_or_else(|| "the API server gave the Secret no uid".to_string()))
}

/// Whether the run's Secrets are still the ones it made (by the uids it
/// recorded): the arguments, and the current step's answers. One deleted or
/// replaced under its name may have handed the tool other input. Runs made
/// before arguments moved to Secrets recorded none and pass.
pub async fn intact(secrets: &Api<Secret>, run: &ToolRun) -> Result<bool> {
    let status = run.status.clone().unwrap_or_default();
    let run_name = run.metadata.name.as_deref().unwrap_or_default();
    let step = run.step();
    let recorded = [
        (arguments_secret_name(run_name), status.arguments_secret_uid),
        (input_secret_name(run_name, step), status.input_secret_uid.filter(|_| step > 0)),
    ];
    for (name, uid) in recorded {
        let Some(uid) = uid else { continue };
        let stored = secrets.get_opt(&name).await.map_err(|source| Error::Work {
            noun: ToolRun::NOUN,
            action: "read a Secret of",
            name: name.clone(),
            source,
        })?;
        if stored.and_then(|s| s.metadata.uid).as_deref() != Some(uid.as_str()) {
            return Ok(false);
        }
    }
    Ok(true)
}
