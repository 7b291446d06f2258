//! The tasks beside the tool runs' reconcile when an outputs store is
//! configured: the outputs server, the sweep, and (with a volume per
//! replica) the copies between replicas.

use std::sync::Arc;
use std::time::Duration;

use super::RunShell;

/// How often files no run keeps are looked for.
const OUTPUTS_SWEEP: Duration = Duration::from_secs(60);

/// Starts them; nothing without a store.
pub(super) fn start(shell: &Arc<RunShell>) {
    let (Some(outputs), Some(keys)) = (shell.outputs.clone(), shell.keys.clone()) else { return };
    let served =
        crate::outputs::serve(outputs.addr, outputs.store.clone(), keys.clone(), shell.store.clone());
    tokio::spawn(async move {
        if let Err(err) = served.await {
            tracing::error!(error = %err, "the outputs server stopped");
        }
    });
    // With election and a volume per replica, every replica keeps a
    // copy of the embedded store, and a new one is ready once it holds
    // one (registered here, before it can say ready without it).
    if outputs.own_disk && !outputs.url.is_empty() && shell.leadership.is_elected() {
        use crate::outputs::mirror;
        let first_copy = shell.readiness.register_for_readyz(mirror::FIRST_COPY);
        let readiness = shell.readiness.clone();
        let copying = mirror::Mirror {
            outputs: outputs.store.clone(),
            runs: shell.store.clone(),
            keys: keys.clone(),
            leader_url: outputs.url.clone(),
            outputs_port: outputs.addr.port(),
            api: shell.client.clone(),
            caches_listed: Box::new(move || {
                readiness.listing().iter().all(|name| name == mirror::FIRST_COPY)
            }),
        };
        tokio::spawn(mirror::mirror_every(copying, mirror::FirstCopy::new(move || first_copy.done())));
    }
    tokio::spawn(crate::outputs::sweep_every(
        outputs.store,
        shell.store.clone(),
        shell.namespace.clone(),
        (shell.leadership.clone(), outputs.own_disk),
        OUTPUTS_SWEEP,
        keys,
    ));
}
