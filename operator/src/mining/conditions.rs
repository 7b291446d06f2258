//! Standard conditions, set the way `meta.SetStatusCondition` does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mining_api::{Condition, ConditionStatus};

/// Sets condition `type_`; `lastTransitionTime` moves only when the status
/// changes. Returns whether anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    now: &Time,
    generation: Option<i64>,
) -> bool {
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let before = existing.clone();
            if existing.status != status {
                existing.last_transition_time = now.clone();
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message;
            existing.observed_generation = generation;
            *existing != before
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status,
                reason: reason.to_string(),
                message,
                last_transition_time: now.clone(),
                observed_generation: generation,
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let mut conditions = Vec::new();
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Pending",
            "",
            &at(1),
            Some(1)
        ));
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Mining",
            "1/4",
            &at(2),
            Some(1)
        ));
        assert_eq!(conditions[0].last_transition_time, at(1));
        assert!(set_condition(&mut conditions, "Ready", ConditionStatus::True, "Done", "", &at(3), Some(1)));
        assert_eq!(conditions[0].last_transition_time, at(3));
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn setting_the_same_condition_again_changes_nothing() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, "Ready", ConditionStatus::True, "Done", "m", &at(1), Some(1));
        assert!(!set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::True,
            "Done",
            "m",
            &at(9),
            Some(1)
        ));
        assert_eq!(conditions[0].last_transition_time, at(1));
    }
}
