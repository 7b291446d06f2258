//! Slots bounded per caller and in total: waits, listens and file reads
//! of one replica, so that a caller holding many cannot take those another
//! caller's request needs.

use std::collections::HashMap;
use std::sync::Mutex;

/// Which cap a wait ran into (the metric's label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitCap {
    PerCaller,
    Total,
}

/// The concurrent waits of one replica, bounded per caller and in total: a
/// caller holding many waits open cannot take the memory or the slots that
/// another caller's wait needs. A wait over a cap is not refused: it answers
/// at once, as `wait_seconds: 0` would.
pub struct WaitSlots {
    per_caller: usize,
    total: usize,
    /// Slots held in total, and per caller label.
    held: Mutex<(usize, HashMap<String, usize>)>,
}

/// One wait's slot; dropping it frees the slot.
pub struct WaitSlot<'a> {
    slots: &'a WaitSlots,
    caller_label: String,
}

impl WaitCap {
    pub fn metric_label(self) -> &'static str {
        match self {
            Self::PerCaller => "per_caller",
            Self::Total => "total",
        }
    }
}

impl WaitSlots {
    pub fn new(per_caller: usize, total: usize) -> Self {
        Self { per_caller, total, held: Mutex::new((0, HashMap::new())) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, HashMap<String, usize>)> {
        // Counters only: a panic elsewhere cannot leave them inconsistent.
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot for `caller_label`, or the cap that is full.
    pub fn take(&self, caller_label: &str) -> Result<WaitSlot<'_>, WaitCap> {
        self.reserve(caller_label)?;
        Ok(WaitSlot { slots: self, caller_label: caller_label.to_string() })
    }

    /// [`Self::take`] for a slot that outlives the borrow (a streamed
    /// response holds it until its last byte).
    pub fn take_owned(self: &std::sync::Arc<Self>, caller_label: &str) -> Result<OwnedWaitSlot, WaitCap> {
        self.reserve(caller_label)?;
        Ok(OwnedWaitSlot { slots: self.clone(), caller_label: caller_label.to_string() })
    }

    fn reserve(&self, caller_label: &str) -> Result<(), WaitCap> {
        let mut held = self.lock();
        let (total, per_caller) = &mut *held;
        let mine = per_caller.get(caller_label).copied().unwrap_or(0);
        if mine >= self.per_caller {
            return Err(WaitCap::PerCaller);
        }
        if *total >= self.total {
            return Err(WaitCap::Total);
        }
        *total += 1;
        per_caller.insert(caller_label.to_string(), mine + 1);
        Ok(())
    }

    fn release(&self, caller_label: &str) {
        let mut held = self.lock();
        let (total, per_caller) = &mut *held;
        *total = total.saturating_sub(1);
        if let Some(mine) = per_caller.get_mut(caller_label) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                per_caller.remove(caller_label);
            }
        }
    }

    /// The caps: (per caller, in total).
    pub fn caps(&self) -> (usize, usize) {
        (self.per_caller, self.total)
    }

    /// Slots held now, in total.
    pub fn held(&self) -> usize {
        self.lock().0
    }
}

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        self.slots.release(&self.caller_label);
    }
}

/// A slot held by a value that owns it (see [`WaitSlots::take_owned`]).
pub struct OwnedWaitSlot {
    slots: std::sync::Arc<WaitSlots>,
    caller_label: String,
}

impl Drop for OwnedWaitSlot {
    fn drop(&mut self) {
        self.slots.release(&self.caller_label);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_over_its_cap_gets_no_slot_and_others_still_do() {
        let slots = WaitSlots::new(2, 3);
        let a1 = slots.take("a").unwrap();
        let _a2 = slots.take("a").unwrap();
        assert_eq!(slots.take("a").err(), Some(WaitCap::PerCaller));
        let _b1 = slots.take("b").unwrap();
        assert_eq!(slots.take("c").err(), Some(WaitCap::Total));
        assert_eq!(slots.held(), 3);
        drop(a1);
        assert_eq!(slots.held(), 2);
        let _c1 = slots.take("c").unwrap();
        assert_eq!(slots.take("a").err(), Some(WaitCap::Total));
    }

    #[test]
    fn freed_slots_leave_nothing_behind() {
        let slots = WaitSlots::new(1, 10);
        for _ in 0..100 {
            let slot = slots.take("a").unwrap();
            drop(slot);
        }
        assert_eq!(slots.held(), 0);
        assert!(slots.lock().1.is_empty(), "no per-caller entry outlives its slots");
    }
}
