//! Reads of whole tables: what the verifier checks (the log in order, rows by primary key,
//! counts), the digest a `pin` entry records, and read-only inspection.

use super::db::*;
use super::sql::args;
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::Path;

/// One audit entry as stored (the verifier's name for [`super::AuditEntry`]).
pub type AuditRow = super::AuditEntry;

/// A decision row as the verifier reads it.
#[derive(Debug, Clone)]
pub struct CheckedDecision {
    /// The chosen arm.
    pub arm: i64,
    /// The action set (JSON text).
    pub actions: Option<String>,
    /// The reward as reported.
    pub reward: Option<f64>,
    /// The reward as admitted.
    pub admitted: Option<f64>,
    /// `reward` or `abandoned`.
    pub outcome: Option<String>,
    /// The client's request id.
    pub request_id: Option<String>,
    /// The propensity.
    pub propensity: Option<f64>,
    /// When issued (seconds since the epoch).
    pub issued_unix: Option<f64>,
}

/// A settled ledger row as the verifier reads it.
#[derive(Debug, Clone)]
pub struct CheckedCharge {
    /// The experiment.
    pub experiment: String,
    /// The release number.
    pub release: i64,
    /// The arm.
    pub arm: i64,
    /// The budget's measure.
    pub measure: String,
    /// The cost.
    pub cost: f64,
    /// `intent`, `charged` or `lost`.
    pub status: String,
}

/// The verifier's row lookups by primary key (on SQLite, statements prepared once and cached;
/// on PostgreSQL, prepared once per connection).
pub struct RowReader<'c> {
    reads: &'c Reads,
}

/// The verifier's decision lookup.
const CHECKED_DECISION: &str = "SELECT arm, actions, reward, admitted, outcome, request_id, propensity, issued_unix FROM decisions WHERE experiment = ?1 AND id = ?2";
/// The verifier's ledger lookup.
const CHECKED_CHARGE: &str =
    "SELECT experiment, release, arm, measure, cost, status FROM ledger WHERE id = ?1";

impl<'c> RowReader<'c> {
    /// The lookups on the store's connection.
    ///
    /// # Errors
    /// None today (kept for the statements' preparation).
    pub fn new(reads: &'c Reads) -> Result<Self> {
        Ok(RowReader { reads })
    }

    /// Decision `id` of `experiment`.
    ///
    /// # Errors
    /// Database errors.
    pub fn decision(&mut self, experiment: &str, id: u64) -> Result<Option<CheckedDecision>> {
        self.reads
            .conn
            .row(CHECKED_DECISION, args![experiment, id as i64], |r| {
                Ok(CheckedDecision {
                    arm: r.get(0)?,
                    actions: r.get(1)?,
                    reward: r.get(2)?,
                    admitted: r.get(3)?,
                    outcome: r.get(4)?,
                    request_id: r.get(5)?,
                    propensity: r.get(6)?,
                    issued_unix: r.get(7)?,
                })
            })
    }

    /// Ledger row `id`.
    ///
    /// # Errors
    /// Database errors.
    pub fn ledger(&mut self, id: i64) -> Result<Option<CheckedCharge>> {
        self.reads.conn.row(CHECKED_CHARGE, args![id], |r| {
            Ok(CheckedCharge {
                experiment: r.get(0)?,
                release: r.get(1)?,
                arm: r.get(2)?,
                measure: r.get(3)?,
                cost: r.get(4)?,
                status: r.get(5)?,
            })
        })
    }
}

/// Row counts per experiment of the tables the log explains ([`Reads::table_scan`]).
#[derive(Debug, Default)]
pub struct TableCounts {
    /// Decision rows.
    pub decisions: std::collections::BTreeMap<String, u64>,
    /// Decision rows with a reward.
    pub rewarded: std::collections::BTreeMap<String, u64>,
    /// Settled ledger rows (`charged`, `lost`).
    pub charges: std::collections::BTreeMap<String, u64>,
    /// Ledger rows of status `intent`.
    pub intents: std::collections::BTreeMap<String, u64>,
}

/// A read-only view of one experiment, for tests and operators (reads protected data: rewards).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Inspection {
    /// Decisions issued (rows).
    pub decisions: u64,
    /// Rewarded decisions.
    pub rewarded: u64,
    /// `(decision_id, arm, reward as reported)` of every rewarded decision.
    pub rewards: Vec<(u64, usize, f64)>,
    /// The experiment row's counters: issued, observed, releases.
    pub issued: u64,
    /// Rewards applied to the policy according to the service's counter.
    pub observed: u64,
    /// Completed commitments (episodes) whose release was charged.
    pub releases: u64,
    /// Ledger rows by status: `charged`, `lost` (an intent that never completed: charged),
    /// `intent` (open; only while the service runs).
    pub ledger_charged: u64,
    /// See `ledger_charged`.
    pub ledger_lost: u64,
    /// See `ledger_charged`.
    pub ledger_open: u64,
    /// Sum of the costs of charged and lost ledger rows.
    pub ledger_total: f64,
    /// The state of the policy in the stored session snapshot, as JSON.
    pub policy_state: serde_json::Value,
}

/// Inspect experiment `name` in the database at `path` (read-only).
///
/// # Errors
/// No such database or experiment.
pub fn inspect(path: &Path, name: &str) -> Result<Inspection> {
    let store = Store::open_read_only(path)?;
    let conn = &store.reads.conn;
    let (snapshot, issued, observed, releases): (Vec<u8>, i64, i64, i64) = conn
        .row(
            "SELECT snapshot, issued, observed, releases FROM experiments WHERE name = ?1",
            args![name],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?
        .with_context(|| format!("experiment = {name:?}: not in --db {}", store.reads.name))?;
    // A session snapshot (schema 2), or a bare policy snapshot (a schema-1 database not yet
    // opened by this build).
    let snap = if dpbandits::session::Session::is_session_snapshot(&snapshot) {
        dpbandits::session::Session::restore(&snapshot)?
            .policy()
            .snapshot()?
    } else {
        dpbandits::snapshot::Snapshot::decode(&snapshot)?
    };
    let decisions: i64 = conn.value(
        "SELECT COUNT(*) FROM decisions WHERE experiment = ?1",
        args![name],
    )?;
    let rewards = conn.rows(
        "SELECT id, arm, reward FROM decisions WHERE experiment = ?1 AND reward IS NOT NULL ORDER BY id",
        args![name],
        |r| {
            Ok((
                r.get::<i64>(0)? as u64,
                r.get::<i64>(1)? as usize,
                r.get(2)?,
            ))
        },
    )?;
    let count = |status: &str| -> Result<u64> {
        Ok(conn.value::<i64>(
            "SELECT COUNT(*) FROM ledger WHERE experiment = ?1 AND status = ?2",
            args![name, status],
        )? as u64)
    };
    let ledger_total: f64 = conn.value(
        "SELECT COALESCE(SUM(cost), 0.0) FROM ledger WHERE experiment = ?1 AND status IN ('charged', 'lost')",
        args![name],
    )?;
    Ok(Inspection {
        decisions: decisions as u64,
        rewarded: rewards.len() as u64,
        rewards,
        issued: issued as u64,
        observed: observed as u64,
        releases: releases as u64,
        ledger_charged: count("charged")?,
        ledger_lost: count("lost")?,
        ledger_open: count("intent")?,
        ledger_total,
        policy_state: serde_json::to_value(snap.state_value())?,
    })
}

impl Reads {
    /// The digest that a `pin` audit entry records for the decisions of an experiment created
    /// before its decision entries carried `request_id`, `propensity` and `issued_unix`: SHA-256
    /// over one line per decision with `id <= upto`, in id order (`id`, `request_id`, the bits of
    /// `propensity` and of `issued_unix`, `-` for none). Returns the number of rows and the digest.
    ///
    /// # Errors
    /// Database errors.
    pub fn decisions_digest(&self, experiment: &str, upto: u64) -> Result<(u64, String)> {
        let mut h = Sha256::new();
        let mut n = 0u64;
        let bits = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:016x}", v.to_bits()));
        self.conn.each(
            "SELECT id, request_id, propensity, issued_unix FROM decisions WHERE experiment = ?1 AND id <= ?2 ORDER BY id",
            args![experiment, upto as i64],
            |r| {
                let (id, rid, p, at): (i64, Option<String>, Option<f64>, Option<f64>) =
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                let rid = rid.map_or("-".to_string(), |r| format!("{r:?}"));
                h.update(format!("{id}\t{rid}\t{}\t{}\n", bits(p), bits(at)).as_bytes());
                n += 1;
                Ok(())
            },
        )?;
        Ok((n, hex(&h.finalize())))
    }

    /// Whether the database has an `audit` table (a dpbandits-serve database).
    ///
    /// # Errors
    /// Database errors (e.g. not an SQLite database).
    pub fn has_audit_table(&self) -> Result<bool> {
        self.conn.has_table("audit")
    }

    /// The number of audit entries.
    ///
    /// # Errors
    /// Database errors.
    pub fn audit_count(&self) -> Result<i64> {
        self.conn.value("SELECT COUNT(*) FROM audit", args![])
    }

    /// Whether experiment `name` exists (in the committed state a reader sees).
    ///
    /// # Errors
    /// Database errors.
    pub fn experiment_exists(&self, name: &str) -> Result<bool> {
        Ok(self
            .conn
            .row(
                "SELECT name FROM experiments WHERE name = ?1",
                args![name],
                |_| Ok(()),
            )?
            .is_some())
    }

    /// Call `f` with every audit entry in order (one pass, bounded memory).
    ///
    /// # Errors
    /// Database errors, or `f`'s.
    pub fn for_each_audit_entry(&self, f: impl FnMut(AuditRow) -> Result<()>) -> Result<()> {
        self.for_each_audit_entry_after(0, f)
    }

    /// Late outcomes stored with the decisions, per experiment: `(decision id, late_reward,
    /// outcome)` in id order; `None` for a database without the `late_reward` column.
    ///
    /// # Errors
    /// Database errors.
    #[allow(clippy::type_complexity)]
    pub fn late_outcomes(
        &self,
    ) -> Result<Option<std::collections::BTreeMap<String, Vec<(u64, f64, Option<String>)>>>> {
        if !self.conn.has_column("decisions", "late_reward")? {
            return Ok(None);
        }
        let mut stored: std::collections::BTreeMap<String, Vec<(u64, f64, Option<String>)>> =
            std::collections::BTreeMap::new();
        self.conn.each(
            "SELECT experiment, id, late_reward, outcome FROM decisions WHERE late_reward IS NOT NULL ORDER BY experiment, id",
            args![],
            |r| {
                let (exp, id, reward, outcome) = (
                    r.get::<String>(0)?,
                    r.get::<i64>(1)? as u64,
                    r.get::<f64>(2)?,
                    r.get::<Option<String>>(3)?,
                );
                stored.entry(exp).or_default().push((id, reward, outcome));
                Ok(())
            },
        )?;
        Ok(Some(stored))
    }
}
