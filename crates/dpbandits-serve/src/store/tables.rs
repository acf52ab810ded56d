//! The service's tables: experiments, decisions and the ledger.

use super::db::*;
use anyhow::Result;
use rusqlite::{OptionalExtension, params};

/// One stored experiment, as [`Reads::load_experiments`] reads it.
#[derive(Debug, Clone)]
pub struct ExperimentRow {
    /// The experiment's name.
    pub name: String,
    /// Its registry kind.
    pub kind: String,
    /// Number of arms.
    pub arms: usize,
    /// SHA-256 of the client token.
    pub token_hash: String,
    /// The configuration the experiment was created with (JSON text).
    pub config: String,
    /// The stored state: a session snapshot (schema 2) or a bare policy snapshot (schema 1).
    pub snapshot: Vec<u8>,
    /// The stored counters.
    pub counters: Counters,
}

/// The service's queryable counters of one experiment: copies of the session's (decisions
/// issued, rewards observed, the open commitment) and the number of completed commitments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Decisions issued.
    pub issued: u64,
    /// Rewards applied.
    pub observed: u64,
    /// The open commitment: its arm and its rounds not yet observed.
    pub commit: Option<(usize, u64)>,
    /// Completed commitments (releases).
    pub releases: u64,
}

/// A new experiment's row.
#[derive(Debug, Clone)]
pub struct NewExperiment<'a> {
    /// The name.
    pub name: &'a str,
    /// The registry kind.
    pub kind: &'a str,
    /// Number of arms.
    pub arms: usize,
    /// The configuration (JSON text).
    pub config: &'a str,
    /// SHA-256 of the client token.
    pub token_hash: &'a str,
    /// The guarantee (JSON text).
    pub guarantee: &'a str,
    /// The session snapshot.
    pub snapshot: &'a [u8],
    /// The create call's `request_id` and the SHA-256 of its body (idempotent creation).
    pub create_request: Option<(&'a str, &'a str)>,
}

/// A new decision row.
#[derive(Debug, Clone, Copy)]
pub struct NewDecision<'a> {
    /// Decision id (1-based).
    pub id: u64,
    /// The chosen arm (contextual: the index of the chosen action).
    pub arm: usize,
    /// 0-based round.
    pub round: u64,
    /// The client's `request_id`.
    pub request_id: Option<&'a str>,
    /// Contextual: the round's action set (JSON text, `k x d`).
    pub actions: Option<&'a str>,
    /// The policy's probability of the chosen action, where the kind defines one.
    pub propensity: Option<f64>,
    /// When issued, in seconds since the Unix epoch ([`unix_now`]; the reward deadline counts
    /// from it). The same value goes into the decision's audit entry.
    pub issued_unix: f64,
}

/// One decision as exported (protected data: it holds the reward).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DecisionRow {
    /// Decision id.
    pub decision_id: u64,
    /// 0-based round.
    pub round: u64,
    /// The chosen arm (contextual: the index of the chosen action).
    pub arm: u64,
    /// The client's `request_id`.
    pub request_id: Option<String>,
    /// When issued.
    pub issued: String,
    /// The reward as reported.
    pub reward: Option<f64>,
    /// The reward as the boundary admitted it (clipped).
    pub admitted: Option<f64>,
    /// When rewarded.
    pub rewarded: Option<String>,
    /// Contextual: the action set (JSON).
    pub actions: Option<serde_json::Value>,
    /// The policy's probability of the chosen action.
    pub propensity: Option<f64>,
    /// `reward`, `abandoned` (the dropout reward was recorded), or none while pending.
    pub outcome: Option<String>,
    /// A true outcome reported after the decision was abandoned (stored, never given to the
    /// policy).
    pub late_reward: Option<f64>,
    /// When the late outcome was received.
    pub late_received: Option<String>,
}

/// A stored decision: its arm, its reward if reported, its outcome.
pub type StoredDecision = (usize, Option<f64>, Option<String>);

/// An open release intent (a ledger row of status `intent`).
#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    /// Ledger row id.
    pub id: i64,
    /// The experiment.
    pub experiment: String,
    /// The release number.
    pub release: i64,
    /// The arm.
    pub arm: i64,
    /// Its cost.
    pub cost: f64,
}

/// One ledger row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LedgerRow {
    /// Row id.
    pub id: i64,
    /// Release number.
    pub release: i64,
    /// Arm.
    pub arm: i64,
    /// Rewards the release covers (a public count: the commitment's length).
    pub rewards: i64,
    /// `rho` or `epsilon`.
    pub measure: String,
    /// Cost.
    pub cost: f64,
    /// `intent`, `charged` or `lost`.
    pub status: String,
    /// When written.
    pub created: String,
}

/// An experiment's ledger totals over its charged and lost rows (open intents excluded).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LedgerTotals {
    /// Charged and lost rows.
    pub charges: u64,
    /// The sum of their costs.
    pub total: f64,
    /// The largest number of rows of one release number (a release redone after a crash has 2).
    pub max_per_release: u64,
}

impl Reads {
    /// Every stored experiment.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn load_experiments(&self) -> Result<Vec<ExperimentRow>> {
        let conn = &self.conn;
        let mut stmt = conn.prepare(
            "SELECT name, kind, arms, token_hash, snapshot, issued, observed, commit_arm, commit_left, releases, config
             FROM experiments ORDER BY name",
        )?;
        let rows = stmt
            .query_map([], |r| {
                let commit = match (r.get::<_, Option<i64>>(7)?, r.get::<_, Option<i64>>(8)?) {
                    (Some(a), Some(l)) => Some((a as usize, l as u64)),
                    _ => None,
                };
                Ok(ExperimentRow {
                    name: r.get(0)?,
                    kind: r.get(1)?,
                    arms: r.get::<_, i64>(2)? as usize,
                    token_hash: r.get(3)?,
                    config: r.get(10)?,
                    snapshot: r.get(4)?,
                    counters: Counters {
                        issued: r.get::<_, i64>(5)? as u64,
                        observed: r.get::<_, i64>(6)? as u64,
                        commit,
                        releases: r.get::<_, i64>(9)? as u64,
                    },
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The stored snapshot of experiment `name`.
    ///
    /// # Errors
    /// SQLite errors, or no such experiment.
    pub fn load_snapshot(&self, name: &str) -> Result<Vec<u8>> {
        let conn = &self.conn;
        Ok(conn.query_row(
            "SELECT snapshot FROM experiments WHERE name = ?1",
            [name],
            |r| r.get(0),
        )?)
    }

    /// The experiment a create `request_id` made: `(name, body hash)`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn find_create_request(&self, request_id: &str) -> Result<Option<(String, String)>> {
        let conn = &self.conn;
        Ok(conn
            .query_row(
                "SELECT name, create_hash FROM experiments WHERE create_request = ?1",
                [request_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    /// The decision a `request_id` already got: `(decision_id, arm)`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn find_request(&self, name: &str, request_id: &str) -> Result<Option<(u64, usize)>> {
        let conn = &self.conn;
        Ok(conn
            .prepare_cached(
                "SELECT id, arm FROM decisions WHERE experiment = ?1 AND request_id = ?2",
            )?
            .query_row(params![name, request_id], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as usize))
            })
            .optional()?)
    }

    /// An experiment's decisions with `decision_id > after`, at most `limit`, in order.
    ///
    /// # Errors
    /// SQLite errors, or a stored action set that is not JSON.
    pub fn decision_rows(&self, name: &str, after: u64, limit: u64) -> Result<Vec<DecisionRow>> {
        let conn = &self.conn;
        let mut stmt = conn.prepare(
            "SELECT id, round, arm, request_id, issued, reward, admitted, rewarded, actions, propensity, outcome, late_reward, late_received
             FROM decisions WHERE experiment = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![name, after as i64, limit as i64], |r| {
                Ok((
                    DecisionRow {
                        decision_id: r.get::<_, i64>(0)? as u64,
                        round: r.get::<_, i64>(1)? as u64,
                        arm: r.get::<_, i64>(2)? as u64,
                        request_id: r.get(3)?,
                        issued: r.get(4)?,
                        reward: r.get(5)?,
                        admitted: r.get(6)?,
                        rewarded: r.get(7)?,
                        actions: None,
                        propensity: r.get(9)?,
                        outcome: r.get(10)?,
                        late_reward: r.get(11)?,
                        late_received: r.get(12)?,
                    },
                    r.get::<_, Option<String>>(8)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(mut d, a)| {
                d.actions = a.map(|a| serde_json::from_str(&a)).transpose()?;
                Ok(d)
            })
            .collect()
    }

    /// A decision's arm, its reward if reported and its outcome (`reward`, `abandoned`; `None`
    /// before schema 3): `None` for no such decision.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn decision(&self, name: &str, id: u64) -> Result<Option<StoredDecision>> {
        let conn = &self.conn;
        Ok(conn
            .prepare_cached(
                "SELECT arm, reward, outcome FROM decisions WHERE experiment = ?1 AND id = ?2",
            )?
            .query_row(params![name, id as i64], |r| {
                Ok((r.get::<_, i64>(0)? as usize, r.get(1)?, r.get(2)?))
            })
            .optional()?)
    }

    /// The pending decisions of `name` issued at or before `cutoff` (Unix seconds), oldest first
    /// (decisions stored before schema 3 have no issue time and never expire).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn expired_decisions(&self, name: &str, cutoff: f64) -> Result<Vec<u64>> {
        let conn = &self.conn;
        let mut stmt = conn.prepare(
            "SELECT id FROM decisions WHERE experiment = ?1 AND reward IS NULL
             AND issued_unix IS NOT NULL AND issued_unix <= ?2 ORDER BY id",
        )?;
        let rows = stmt
            .query_map(params![name, cutoff], |r| Ok(r.get::<_, i64>(0)? as u64))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Every pending decision of `name` (no reward recorded), oldest first.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn pending_decisions(&self, name: &str) -> Result<Vec<u64>> {
        let conn = &self.conn;
        let mut stmt = conn.prepare(
            "SELECT id FROM decisions WHERE experiment = ?1 AND reward IS NULL ORDER BY id",
        )?;
        let rows = stmt
            .query_map(params![name], |r| Ok(r.get::<_, i64>(0)? as u64))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// An experiment's ledger rows with `id > after`, at most `limit`, in order.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn ledger_rows(&self, name: &str, after: i64, limit: u64) -> Result<Vec<LedgerRow>> {
        let conn = &self.conn;
        let mut stmt = conn.prepare(
            "SELECT id, release, arm, rewards, measure, cost, status, created FROM ledger
             WHERE experiment = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![name, after, limit as i64], |r| {
                Ok(LedgerRow {
                    id: r.get(0)?,
                    release: r.get(1)?,
                    arm: r.get(2)?,
                    rewards: r.get(3)?,
                    measure: r.get(4)?,
                    cost: r.get(5)?,
                    status: r.get(6)?,
                    created: r.get(7)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The charged and lost rows of one release of experiment `name` (through the index
    /// `ledger_release`).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn ledger_release_charges(&self, name: &str, release: u64) -> Result<u64> {
        let conn = &self.conn;
        let n: i64 = conn.query_row(
            "SELECT COUNT(*) FROM ledger WHERE experiment = ?1 AND release = ?2 AND status != 'intent'",
            params![name, release as i64],
            |r| r.get(0),
        )?;
        Ok(n as u64)
    }

    /// The ledger totals of experiment `name` (SQL aggregates; no row is loaded).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn ledger_totals(&self, name: &str) -> Result<LedgerTotals> {
        let conn = &self.conn;
        let (charges, total): (i64, f64) = conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(cost), 0) FROM ledger WHERE experiment = ?1 AND status != 'intent'",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let max: i64 = conn.query_row(
            "SELECT COALESCE(MAX(c), 0) FROM (SELECT COUNT(*) AS c FROM ledger
             WHERE experiment = ?1 AND status != 'intent' GROUP BY release)",
            [name],
            |r| r.get(0),
        )?;
        Ok(LedgerTotals {
            charges: charges as u64,
            total,
            max_per_release: max as u64,
        })
    }

    /// Completed decisions (with a recorded reward, abandoned ones included) per arm `0..arms`.
    ///
    /// # Errors
    /// A database error.
    pub fn completed_by_arm(&self, experiment: &str, arms: usize) -> Result<Vec<u64>> {
        let conn = &self.conn;
        let mut out = vec![0u64; arms];
        let mut stmt = conn.prepare(
            "SELECT arm, COUNT(*) FROM decisions WHERE experiment = ?1 AND reward IS NOT NULL GROUP BY arm",
        )?;
        let rows = stmt.query_map([experiment], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        })?;
        for row in rows {
            let (arm, n) = row?;
            if let Some(slot) = usize::try_from(arm).ok().and_then(|a| out.get_mut(a)) {
                *slot = n as u64;
            }
        }
        Ok(out)
    }

    /// Per-arm counts of an experiment's decisions: `(arm, rewarded with a true outcome, abandoned
    /// (imputed), late outcomes stored, pending)`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn outcome_counts(&self, name: &str) -> Result<Vec<(usize, [u64; 4])>> {
        let conn = &self.conn;
        let mut stmt = conn.prepare_cached(
            "SELECT arm,
                    SUM(reward IS NOT NULL AND COALESCE(outcome, 'reward') = 'reward'),
                    SUM(outcome = 'abandoned'),
                    SUM(late_reward IS NOT NULL),
                    SUM(reward IS NULL)
             FROM decisions WHERE experiment = ?1 GROUP BY arm ORDER BY arm",
        )?;
        let rows = stmt
            .query_map(params![name], |r| {
                let g = |i: usize| r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0) as u64);
                Ok((r.get::<_, i64>(0)? as usize, [g(1)?, g(2)?, g(3)?, g(4)?]))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Enrolment over time: at most `points` `(unix seconds, decisions issued so far)` pairs of
    /// `name`, evenly spaced over its decisions (one primary-key read per point).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn enrolment(&self, name: &str, points: u64) -> Result<Vec<(f64, u64)>> {
        let conn = &self.conn;
        let total: i64 = conn
            .prepare_cached("SELECT COALESCE(MAX(id), 0) FROM decisions WHERE experiment = ?1")?
            .query_row(params![name], |r| r.get(0))?;
        let total = total.max(0) as u64;
        let mut out = Vec::new();
        if total == 0 {
            return Ok(out);
        }
        let step = total.div_ceil(points.max(1)).max(1);
        let mut stmt = conn.prepare_cached(
            "SELECT issued_unix FROM decisions WHERE experiment = ?1 AND id = ?2",
        )?;
        let mut id = 1;
        loop {
            let t: Option<f64> = stmt
                .query_row(params![name, id as i64], |r| r.get(0))
                .optional()?
                .flatten();
            if let Some(t) = t {
                out.push((t, id));
            }
            if id == total {
                break;
            }
            id = (id + step).min(total);
        }
        Ok(out)
    }
}

impl Tx<'_> {
    /// Insert a new experiment (counters at zero) inside `tx`.
    ///
    /// # Errors
    /// SQLite errors (an existing name among them).
    pub fn insert_experiment(&self, e: &NewExperiment<'_>) -> Result<()> {
        let tx = &self.reads.conn;
        tx.execute(
            "INSERT INTO experiments (name, kind, arms, config, token_hash, guarantee, created, snapshot, issued, observed, commit_arm, commit_left, releases, create_request, create_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, 0, NULL, NULL, 0, ?9, ?10)",
            params![
                e.name,
                e.kind,
                e.arms as i64,
                e.config,
                e.token_hash,
                e.guarantee,
                now(),
                e.snapshot,
                e.create_request.map(|x| x.0),
                e.create_request.map(|x| x.1)
            ],
        )?;
        Ok(())
    }

    /// Replace an experiment's client-token hash inside `tx`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn set_token_hash(&self, name: &str, token_hash: &str) -> Result<()> {
        let tx = &self.reads.conn;
        tx.execute(
            "UPDATE experiments SET token_hash = ?2 WHERE name = ?1",
            params![name, token_hash],
        )?;
        Ok(())
    }

    /// Write an experiment's state inside `tx`: the session snapshot and the counters.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn update_state(&self, name: &str, snapshot: &[u8], c: &Counters) -> Result<()> {
        let tx = &self.reads.conn;
        tx.prepare_cached("UPDATE experiments SET snapshot = ?2, issued = ?3, observed = ?4, commit_arm = ?5, commit_left = ?6, releases = ?7
             WHERE name = ?1")?
            .execute(
            params![
                name,
                snapshot,
                c.issued as i64,
                c.observed as i64,
                c.commit.map(|x| x.0 as i64),
                c.commit.map(|x| x.1 as i64),
                c.releases as i64
            ],
        )?;
        Ok(())
    }

    /// Insert a decision row inside `tx`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn insert_decision(&self, name: &str, d: &NewDecision<'_>) -> Result<()> {
        let tx = &self.reads.conn;
        tx.prepare_cached("INSERT INTO decisions (experiment, id, arm, round, request_id, issued, actions, propensity, issued_unix)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?
            .execute(
            params![
                name,
                d.id as i64,
                d.arm as i64,
                d.round as i64,
                d.request_id,
                now(),
                d.actions,
                d.propensity,
                d.issued_unix
            ],
        )?;
        Ok(())
    }

    /// Record a decision's reward (as reported, and as admitted by the boundary) and its outcome
    /// (`reward`, or `abandoned`: the dropout reward) inside `tx`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn record_reward(
        &self,
        name: &str,
        id: u64,
        reward: f64,
        admitted: f64,
        outcome: &str,
    ) -> Result<()> {
        let tx = &self.reads.conn;
        tx.prepare_cached("UPDATE decisions SET reward = ?3, admitted = ?4, rewarded = ?5, outcome = ?6 WHERE experiment = ?1 AND id = ?2")?
            .execute(
            params![name, id as i64, reward, admitted, now(), outcome],
        )?;
        Ok(())
    }

    /// Write a release intent (the caller commits it and makes it durable before the release is
    /// drawn: `Service` commits the batch's transaction); returns its ledger row id.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn insert_intent(
        &self,
        name: &str,
        release: u64,
        arm: usize,
        rewards: u64,
        measure: &str,
        cost: f64,
    ) -> Result<i64> {
        let tx = &self.reads.conn;
        tx.execute(
            "INSERT INTO ledger (experiment, release, arm, rewards, measure, cost, status, created)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'intent', ?7)",
            params![
                name,
                release as i64,
                arm as i64,
                rewards as i64,
                measure,
                cost,
                now()
            ],
        )?;
        Ok(tx.last_insert_rowid())
    }

    /// Every open release intent, oldest first.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn open_intents(&self) -> Result<Vec<Intent>> {
        let tx = &self.reads.conn;
        let mut stmt = tx.prepare(
            "SELECT id, experiment, release, arm, cost FROM ledger WHERE status = 'intent' ORDER BY id",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Intent {
                    id: r.get(0)?,
                    experiment: r.get(1)?,
                    release: r.get(2)?,
                    arm: r.get(3)?,
                    cost: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Set a ledger row's status (`charged`, `lost`) inside `tx`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn set_ledger_status(&self, id: i64, status: &str) -> Result<()> {
        let tx = &self.reads.conn;
        tx.execute(
            "UPDATE ledger SET status = ?2 WHERE id = ?1",
            params![id, status],
        )?;
        Ok(())
    }

    /// Store a late outcome of an abandoned decision inside `tx`: only the first is kept (returns
    /// `false` when one is stored already).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn record_late(&self, name: &str, id: u64, reward: f64) -> Result<bool> {
        let tx = &self.reads.conn;
        let n = tx
            .prepare_cached(
                "UPDATE decisions SET late_reward = ?3, late_received = ?4
                 WHERE experiment = ?1 AND id = ?2 AND outcome = 'abandoned' AND late_reward IS NULL",
            )?
            .execute(params![name, id as i64, reward, now()])?;
        Ok(n == 1)
    }
}
