//! Fair admission of tool runs (pure): at most `limit` run at once, and a
//! free slot goes to the waiting run whose caller holds the fewest slots,
//! oldest first — so one caller's burst cannot keep another's call waiting.
//!
//! Parties are caller labels of proven runs only (the operator runs no
//! other). Every run is counted in exactly one place — holding a slot (it
//! has a Job or says Running) or waiting (in the fair order) — whatever the
//! cache's lag, so concurrent reconciles each decide the same.

use mining_api::Work as _;
use std::collections::HashMap;

use mining_api::{ToolRun, ToolRunPhase};

/// A run's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Start,
    /// `running` of `limit` slots are held; `ahead` runs go first.
    Queued {
        running: usize,
        limit: usize,
        ahead: usize,
    },
}

/// One proven, unfinished run as admission sees it.
#[derive(Debug, Clone)]
pub struct Standing {
    pub name: String,
    pub party: String,
    pub created: i64,
    pub holds_slot: bool,
}

impl Standing {
    /// The standing of `run`, when it is one admission counts: proven (by
    /// `proven`), not finished, not being cancelled.
    pub fn of(run: &ToolRun, proven: impl Fn(&ToolRun) -> bool) -> Option<Self> {
        if run.is_finished() || run.spec.cancel || run.metadata.deletion_timestamp.is_some() || !proven(run) {
            return None;
        }
        let status = run.status.as_ref();
        Some(Self {
            name: run.metadata.name.clone()?,
            party: run.caller_label().unwrap_or_default().to_string(),
            created: run.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second()),
            holds_slot: run.phase() == ToolRunPhase::Running || status.is_some_and(|s| s.job_uid.is_some()),
        })
    }
}

/// Whether the waiting run `name` may start now, given every standing.
pub fn admit(name: &str, standings: &[Standing], limit: usize) -> Admission {
    let running = standings.iter().filter(|s| s.holds_slot).count();
    let mut held: HashMap<&str, usize> = HashMap::new();
    for standing in standings.iter().filter(|s| s.holds_slot) {
        *held.entry(standing.party.as_str()).or_default() += 1;
    }
    let mut waiting: Vec<&Standing> = standings.iter().filter(|s| !s.holds_slot).collect();
    waiting.sort_by(|a, b| {
        let key = |s: &Standing| (held.get(s.party.as_str()).copied().unwrap_or(0), s.created);
        key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
    });
    // Unknown to the cache yet (made a moment ago): last in line.
    let ahead = waiting.iter().position(|s| s.name == name).unwrap_or(waiting.len());
    if ahead < limit.saturating_sub(running) {
        Admission::Start
    } else {
        Admission::Queued { running, limit, ahead }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(name: &str, party: &str, created: i64, holds_slot: bool) -> Standing {
        Standing { name: name.into(), party: party.into(), created, holds_slot }
    }

    #[test]
    fn free_slots_go_first_to_the_party_holding_fewest_then_oldest() {
        // Alice holds both slots of three and has two more waiting; bob's newer call goes first.
        let standings = [
            standing("a1", "alice", 1, true),
            standing("a2", "alice", 2, true),
            standing("a3", "alice", 3, false),
            standing("a4", "alice", 4, false),
            standing("b1", "bob", 9, false),
        ];
        assert_eq!(admit("b1", &standings, 3), Admission::Start);
        assert_eq!(admit("a3", &standings, 3), Admission::Queued { running: 2, limit: 3, ahead: 1 });
        assert_eq!(admit("a3", &standings, 4), Admission::Start, "two free slots: bob's and a3");
        assert_eq!(admit("a4", &standings, 4), Admission::Queued { running: 2, limit: 4, ahead: 2 });
    }

    #[test]
    fn a_full_house_queues_everyone_and_an_unseen_run_is_last() {
        let standings = [standing("a1", "alice", 1, true), standing("b1", "bob", 2, false)];
        assert_eq!(admit("b1", &standings, 1), Admission::Queued { running: 1, limit: 1, ahead: 0 });
        assert_eq!(admit("new", &standings, 2), Admission::Queued { running: 1, limit: 2, ahead: 1 });
        assert_eq!(admit("new", &standings, 3), Admission::Start, "two free slots: b1's and its");
    }
}
