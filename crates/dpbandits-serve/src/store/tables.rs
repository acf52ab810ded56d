//! The service's tables: experiments, decisions and the ledger.

use super::db::*;
use super::sql::args;
use anyhow::Result;

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

/// An [`Intent`] from a row of `id, experiment, release, arm, cost, key`.
fn intent_of(r: &super::sql::Row<'_>) -> Result<Intent> {
    let key: Option<Vec<u8>> = r.get(5)?;
    Ok(Intent {
        id: r.get(0)?,
        experiment: r.get(1)?,
        release: r.get(2)?,
        arm: r.get(3)?,
        cost: r.get(4)?,
        key: key.and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok()),
    })
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
    /// The key its release is drawn with (`release_keys`), if one was stored with it (intents
    /// written before release keys existed have none).
    pub key: Option<[u8; 32]>,
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
    /// Database errors.
    pub fn load_experiments(&self) -> Result<Vec<ExperimentRow>> {
        self.conn.rows(
            "SELECT name, kind, arms, token_hash, snapshot, issued, observed, commit_arm, commit_left, releases, config
             FROM experiments ORDER BY name",
            args![],
            |r| {
                let commit = match (r.get::<Option<i64>>(7)?, r.get::<Option<i64>>(8)?) {
                    (Some(a), Some(l)) => Some((a as usize, l as u64)),
                    _ => None,
                };
                Ok(ExperimentRow {
                    name: r.get(0)?,
                    kind: r.get(1)?,
                    arms: r.get::<i64>(2)? as usize,
                    token_hash: r.get(3)?,
                    config: r.get(10)?,
                    snapshot: r.get(4)?,
                    counters: Counters {
                        issued: r.get::<i64>(5)? as u64,
                        observed: r.get::<i64>(6)? as u64,
                        commit,
                        releases: r.get::<i64>(9)? as u64,
                    },
                })
            },
        )
    }

    /// The stored snapshot of experiment `name`.
    ///
    /// # Errors
    /// Database errors, or no such experiment.
    pub fn load_snapshot(&self, name: &str) -> Result<Vec<u8>> {
        self.conn.value(
            "SELECT snapshot FROM experiments WHERE name = ?1",
            args![name],
        )
    }

    /// The experiment a create `request_id` made: `(name, body hash)`.
    ///
    /// # Errors
    /// Database errors.
    pub fn find_create_request(&self, request_id: &str) -> Result<Option<(String, String)>> {
        self.conn.row(
            "SELECT name, create_hash FROM experiments WHERE create_request = ?1",
            args![request_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// The decision a `request_id` already got: `(decision_id, arm)`.
    ///
    /// # Errors
    /// Database errors.
    pub fn find_request(&self, name: &str, request_id: &str) -> Result<Option<(u64, usize)>> {
        self.conn.row(
            "SELECT id, arm FROM decisions WHERE experiment = ?1 AND request_id = ?2",
            args![name, request_id],
            |r| Ok((r.get::<i64>(0)? as u64, r.get::<i64>(1)? as usize)),
        )
    }

    /// An experiment's decisions with `decision_id > after`, at most `limit`, in order.
    ///
    /// # Errors
    /// Database errors, or a stored action set that is not JSON.
    pub fn decision_rows(&self, name: &str, after: u64, limit: u64) -> Result<Vec<DecisionRow>> {
        self.conn.rows(
            "SELECT id, round, arm, request_id, issued, reward, admitted, rewarded, actions, propensity, outcome, late_reward, late_received
             FROM decisions WHERE experiment = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            args![name, after as i64, limit as i64],
            |r| {
                let actions: Option<String> = r.get(8)?;
                Ok(DecisionRow {
                    decision_id: r.get::<i64>(0)? as u64,
                    round: r.get::<i64>(1)? as u64,
                    arm: r.get::<i64>(2)? as u64,
                    request_id: r.get(3)?,
                    issued: r.get(4)?,
                    reward: r.get(5)?,
                    admitted: r.get(6)?,
                    rewarded: r.get(7)?,
                    actions: actions.map(|a| serde_json::from_str(&a)).transpose()?,
                    propensity: r.get(9)?,
                    outcome: r.get(10)?,
                    late_reward: r.get(11)?,
                    late_received: r.get(12)?,
                })
            },
        )
    }

    /// A decision's arm, its reward if reported and its outcome (`reward`, `abandoned`; `None`
    /// before schema 3): `None` for no such decision.
    ///
    /// # Errors
    /// Database errors.
    pub fn decision(&self, name: &str, id: u64) -> Result<Option<StoredDecision>> {
        self.conn.row(
            "SELECT arm, reward, outcome FROM decisions WHERE experiment = ?1 AND id = ?2",
            args![name, id as i64],
            |r| Ok((r.get::<i64>(0)? as usize, r.get(1)?, r.get(2)?)),
        )
    }

    /// The pending decisions of `name` issued at or before `cutoff` (Unix seconds), oldest first
    /// (decisions stored before schema 3 have no issue time and never expire).
    ///
    /// # Errors
    /// Database errors.
    pub fn expired_decisions(&self, name: &str, cutoff: f64) -> Result<Vec<u64>> {
        self.conn.rows(
            "SELECT id FROM decisions WHERE experiment = ?1 AND reward IS NULL
             AND issued_unix IS NOT NULL AND issued_unix <= ?2 ORDER BY id",
            args![name, cutoff],
            |r| Ok(r.get::<i64>(0)? as u64),
        )
    }

    /// Every pending decision of `name` (no reward recorded), oldest first.
    ///
    /// # Errors
    /// Database errors.
    pub fn pending_decisions(&self, name: &str) -> Result<Vec<u64>> {
        self.conn.rows(
            "SELECT id FROM decisions WHERE experiment = ?1 AND reward IS NULL ORDER BY id",
            args![name],
            |r| Ok(r.get::<i64>(0)? as u64),
        )
    }

    /// An experiment's ledger rows with `id > after`, at most `limit`, in order.
    ///
    /// # Errors
    /// Database errors.
    pub fn ledger_rows(&self, name: &str, after: i64, limit: u64) -> Result<Vec<LedgerRow>> {
        self.conn.rows(
            "SELECT id, release, arm, rewards, measure, cost, status, created FROM ledger
             WHERE experiment = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            args![name, after, limit as i64],
            |r| {
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
            },
        )
    }

    /// The charged and lost rows of one release of experiment `name` (through the index
    /// `ledger_release`).
    ///
    /// # Errors
    /// Database errors.
    pub fn ledger_release_charges(&self, name: &str, release: u64) -> Result<u64> {
        let n: i64 = self.conn.value(
            "SELECT COUNT(*) FROM ledger WHERE experiment = ?1 AND release = ?2 AND status != 'intent'",
            args![name, release as i64],
        )?;
        Ok(n as u64)
    }

    /// The ledger totals of experiment `name` (SQL aggregates; no row is loaded).
    ///
    /// # Errors
    /// Database errors.
    pub fn ledger_totals(&self, name: &str) -> Result<LedgerTotals> {
        let (charges, total): (i64, f64) = self
            .conn
            .row(
                "SELECT COUNT(*), COALESCE(SUM(cost), 0.0) FROM ledger WHERE experiment = ?1 AND status != 'intent'",
                args![name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .unwrap_or((0, 0.0));
        let max: i64 = self.conn.value(
            "SELECT COALESCE(MAX(c), 0) FROM (SELECT COUNT(*) AS c FROM ledger
             WHERE experiment = ?1 AND status != 'intent' GROUP BY release) AS per_release",
            args![name],
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
        let mut out = vec![0u64; arms];
        self.conn.each(
            "SELECT arm, COUNT(*) FROM decisions WHERE experiment = ?1 AND reward IS NOT NULL GROUP BY arm",
            args![experiment],
            |r| {
                let (arm, n) = (r.get::<i64>(0)?, r.get::<i64>(1)?);
                if let Some(slot) = usize::try_from(arm).ok().and_then(|a| out.get_mut(a)) {
                    *slot = n as u64;
                }
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// Per-arm counts of an experiment's decisions: `(arm, rewarded with a true outcome, abandoned
    /// (imputed), late outcomes stored, pending)`.
    ///
    /// # Errors
    /// Database errors.
    pub fn outcome_counts(&self, name: &str) -> Result<Vec<(usize, [u64; 4])>> {
        // `COUNT(CASE WHEN ... THEN 1 END)`: a count of the rows the condition holds for, in the
        // SQL both databases accept (PostgreSQL sums no booleans).
        self.conn.rows(
            "SELECT arm,
                    COUNT(CASE WHEN reward IS NOT NULL AND COALESCE(outcome, 'reward') = 'reward' THEN 1 END),
                    COUNT(CASE WHEN outcome = 'abandoned' THEN 1 END),
                    COUNT(CASE WHEN late_reward IS NOT NULL THEN 1 END),
                    COUNT(CASE WHEN reward IS NULL THEN 1 END)
             FROM decisions WHERE experiment = ?1 GROUP BY arm ORDER BY arm",
            args![name],
            |r| {
                let g = |i: usize| r.get::<i64>(i).map(|v| v as u64);
                Ok((r.get::<i64>(0)? as usize, [g(1)?, g(2)?, g(3)?, g(4)?]))
            },
        )
    }

    /// Enrolment over time: at most `points` `(unix seconds, decisions issued so far)` pairs of
    /// `name`, evenly spaced over its decisions (one primary-key read per point).
    ///
    /// # Errors
    /// Database errors.
    pub fn enrolment(&self, name: &str, points: u64) -> Result<Vec<(f64, u64)>> {
        let total: i64 = self.conn.value(
            "SELECT COALESCE(MAX(id), 0) FROM decisions WHERE experiment = ?1",
            args![name],
        )?;
        let total = total.max(0) as u64;
        let mut out = Vec::new();
        if total == 0 {
            return Ok(out);
        }
        let step = total.div_ceil(points.max(1)).max(1);
        let mut id = 1;
        loop {
            let t: Option<f64> = self
                .conn
                .row(
                    "SELECT issued_unix FROM decisions WHERE experiment = ?1 AND id = ?2",
                    args![name, id as i64],
                    |r| r.get(0),
                )?
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
    /// Database errors (an existing name among them).
    pub fn insert_experiment(&self, e: &NewExperiment<'_>) -> Result<()> {
        self.reads.conn.execute(
            "INSERT INTO experiments (name, kind, arms, config, token_hash, guarantee, created, snapshot, issued, observed, commit_arm, commit_left, releases, create_request, create_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, 0, NULL, NULL, 0, ?9, ?10)",
            args![
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
    /// Database errors.
    pub fn set_token_hash(&self, name: &str, token_hash: &str) -> Result<()> {
        self.reads.conn.execute(
            "UPDATE experiments SET token_hash = ?2 WHERE name = ?1",
            args![name, token_hash],
        )?;
        Ok(())
    }

    /// Write an experiment's state inside `tx`: the session snapshot and the counters.
    ///
    /// # Errors
    /// Database errors.
    pub fn update_state(&self, name: &str, snapshot: &[u8], c: &Counters) -> Result<()> {
        self.reads.conn.execute_deferred(
            "UPDATE experiments SET snapshot = ?2, issued = ?3, observed = ?4, commit_arm = ?5, commit_left = ?6, releases = ?7
             WHERE name = ?1",
            args![
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
    /// Database errors.
    pub fn insert_decision(&self, name: &str, d: &NewDecision<'_>) -> Result<()> {
        self.reads.conn.execute_deferred(
            "INSERT INTO decisions (experiment, id, arm, round, request_id, issued, actions, propensity, issued_unix)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            args![
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
    /// Database errors.
    pub fn record_reward(
        &self,
        name: &str,
        id: u64,
        reward: f64,
        admitted: f64,
        outcome: &str,
    ) -> Result<()> {
        self.reads.conn.execute_deferred(
            "UPDATE decisions SET reward = ?3, admitted = ?4, rewarded = ?5, outcome = ?6 WHERE experiment = ?1 AND id = ?2",
            args![name, id as i64, reward, admitted, now(), outcome],
        )?;
        Ok(())
    }

    /// Write a release intent with the key its release is drawn with
    /// ([`dpbandits::privacy::with_release_key`]; table `release_keys`), which the caller
    /// commits, durable before the release is drawn (`Service` commits the batch's
    /// transaction); returns its ledger row id.
    ///
    /// # Errors
    /// Database errors.
    #[allow(clippy::too_many_arguments)]
    pub fn insert_intent(
        &self,
        name: &str,
        release: u64,
        arm: usize,
        rewards: u64,
        measure: &str,
        cost: f64,
        key: &[u8; 32],
    ) -> Result<i64> {
        let id: i64 = self.reads.conn.value(
            "INSERT INTO ledger (experiment, release, arm, rewards, measure, cost, status, created)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'intent', ?7) RETURNING id",
            args![
                name,
                release as i64,
                arm as i64,
                rewards as i64,
                measure,
                cost,
                now()
            ],
        )?;
        self.reads.conn.execute_deferred(
            "INSERT INTO release_keys (ledger_id, key) VALUES (?1, ?2)",
            args![id, key.to_vec()],
        )?;
        Ok(id)
    }

    /// Every open release intent, oldest first, with its release key if it has one.
    ///
    /// # Errors
    /// Database errors.
    pub fn open_intents(&self) -> Result<Vec<Intent>> {
        self.reads.conn.rows(
            "SELECT l.id, l.experiment, l.release, l.arm, l.cost, k.key FROM ledger l
             LEFT JOIN release_keys k ON k.ledger_id = l.id
             WHERE l.status = 'intent' ORDER BY l.id",
            args![],
            intent_of,
        )
    }

    /// The open intent of release `release` of experiment `name`, if there is one (the
    /// newest): a crash, a failed batch or a lost writer between the intent and its release.
    ///
    /// # Errors
    /// Database errors.
    pub fn open_intent(&self, name: &str, release: u64) -> Result<Option<Intent>> {
        let mut rows = self.reads.conn.rows(
            "SELECT l.id, l.experiment, l.release, l.arm, l.cost, k.key FROM ledger l
             LEFT JOIN release_keys k ON k.ledger_id = l.id
             WHERE l.experiment = ?1 AND l.release = ?2 AND l.status = 'intent'
             ORDER BY l.id DESC LIMIT 1",
            args![name, release as i64],
            intent_of,
        )?;
        Ok(rows.pop())
    }

    /// Set a ledger row's status (`charged`, `lost`) inside `tx`.
    ///
    /// # Errors
    /// Database errors.
    /// A settled row's release key is deleted with it: the key and the release give the exact
    /// sum, so it is kept no longer than a redo may need it.
    pub fn set_ledger_status(&self, id: i64, status: &str) -> Result<()> {
        self.reads.conn.execute_deferred(
            "UPDATE ledger SET status = ?2 WHERE id = ?1",
            args![id, status],
        )?;
        self.reads
            .conn
            .execute_deferred("DELETE FROM release_keys WHERE ledger_id = ?1", args![id])?;
        Ok(())
    }

    /// Store a late outcome of an abandoned decision inside `tx`: only the first is kept (returns
    /// `false` when one is stored already).
    ///
    /// # Errors
    /// Database errors.
    pub fn record_late(&self, name: &str, id: u64, reward: f64) -> Result<bool> {
        let n = self.reads.conn.execute(
            "UPDATE decisions SET late_reward = ?3, late_received = ?4
             WHERE experiment = ?1 AND id = ?2 AND outcome = 'abandoned' AND late_reward IS NULL",
            args![name, id as i64, reward, now()],
        )?;
        Ok(n == 1)
    }
}
