//! How far the verification running in this process has come (the start-up check's progress,
//! answered by `/v1/health` while the service is verifying).

use std::sync::atomic::{AtomicI64, Ordering};

static TOTAL: AtomicI64 = AtomicI64::new(0);
static CHECKED: AtomicI64 = AtomicI64::new(0);

/// A verification of `total` entries starts.
pub(super) fn start(total: i64) {
    TOTAL.store(total, Ordering::Relaxed);
    CHECKED.store(0, Ordering::Relaxed);
}

/// Entry `seq` is being checked (every 4,096th is recorded).
pub(super) fn entry(seq: i64) {
    if seq & 4095 == 0 {
        CHECKED.store(seq, Ordering::Relaxed);
    }
}

/// `(entries checked, entries in the log)` of the newest verification in this process.
pub fn get() -> (i64, i64) {
    (
        CHECKED.load(Ordering::Relaxed),
        TOTAL.load(Ordering::Relaxed),
    )
}

static PASSED: std::sync::Mutex<Option<(String, i64)>> = std::sync::Mutex::new(None);

/// The start-up check passed on `entries` entries (now).
pub fn passed(entries: i64) {
    *PASSED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((crate::store::now(), entries));
}

/// The start-up check's outcome for the monitor page: when it passed and on how many
/// entries, or that it did not run in this process.
pub fn startup_state() -> serde_json::Value {
    match PASSED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
    {
        Some((at, entries)) => serde_json::json!({
            "state": "verified at start-up (chain, tables and sessions against the log)",
            "at": at, "entries": entries}),
        None => {
            serde_json::json!({"state": "not verified in this process", "at": null, "entries": null})
        }
    }
}
