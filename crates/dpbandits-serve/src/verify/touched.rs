//! The rows the walked entries of the log describe: what a checkpoint's row digest is carried
//! forward over (`super::checkpoint`).

use crate::store::Event;
use serde_json::Value;

/// The rows that the walked entries describe (recorded when resuming after a checkpoint: its
/// row digest is carried forward over them).
#[derive(Debug, Default)]
pub(super) struct Touched {
    /// `(experiment, decision id)` of each `decision` entry.
    pub(super) decided: Vec<(String, u64)>,
    /// `(experiment, decision id)` of each `reward` and `abandon` entry.
    pub(super) settled: Vec<(String, u64)>,
    /// The ledger row of each `budget-charge` entry.
    pub(super) charged: Vec<i64>,
}

impl Touched {
    /// Record the row entry `body` describes (its fields were checked by the walk).
    pub(super) fn record(&mut self, exp: &str, event: &str, body: &Value) {
        let id = || body.get("decision_id").and_then(Value::as_u64).unwrap_or(0);
        match Event::parse(event) {
            Some(Event::Decision) => self.decided.push((exp.to_string(), id())),
            Some(Event::Reward | Event::Abandon) => self.settled.push((exp.to_string(), id())),
            Some(Event::BudgetCharge) => self
                .charged
                .push(body.get("ledger_id").and_then(Value::as_i64).unwrap_or(0)),
            _ => {}
        }
    }
}
