//! `dpbandits audit-log verify` and the service's start-up self-check: the audit log proves what
//! happened, and the tables agree with it.
//!
//! Three layers, each failing with a message that names what is wrong:
//!
//! 1. **The chain.** Sequence numbers 1, 2, ... without gaps, every `prev` equal to the previous
//!    entry's hash, every hash recomputed: SHA-256 for entries written before the chain was keyed,
//!    HMAC-SHA256 under the [`AuditKey`] from `meta.audit_keyed_from` on. Without the key nobody
//!    can re-chain an edited log or append a forged entry that verifies.
//! 2. **Pins.** `--expect-head HASH` (with `--expect-entries N`: entry N has that hash; alone: some
//!    entry has it) and `--expect-entries N` (at least N entries) tie the log to a head published
//!    earlier, so truncating the log's tail (or deleting it all) is detected.
//! 3. **The tables against the log.** Every decision row is one `decision` entry (same id, arm and
//!    action-set hash), every recorded reward one `reward` or `abandon` entry (same value as
//!    reported and as admitted, same outcome), every settled ledger row one `budget-charge` entry
//!    (same release, arm, cost and status), every experiment one `create` entry (same kind and
//!    arms) whose client-token hash is the last one the log records, and every experiment's
//!    counters (decisions issued, rewards applied, releases) are the log's counts, as are those
//!    of its stored session snapshot. Nothing in the tables is left unexplained: the counts per
//!    experiment are compared, and the log's entries are authenticated, so each entry matching a
//!    row and equal counts make a one-to-one correspondence. Ledger rows of status `intent` (a
//!    release in flight when the service stopped) are reported; the next start settles them.
//!
//! Memory is bounded by the number of experiments: the log is read once in order and each entry
//! is checked against its row by primary key.

use crate::store::{self, AuditKey, GENESIS};
use anyhow::{Context, Result, bail};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// What the published head pins (`--expect-head`, `--expect-entries`).
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// A head published earlier: the hash of entry `entries` (or of some entry when `entries`
    /// is not given).
    pub head: Option<String>,
    /// The number of entries the log had when `head` was published (alone: the least number of
    /// entries the log must have).
    pub entries: Option<u64>,
}

/// What a successful verification proves.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// Entries checked.
    pub entries: u64,
    /// The hash of the last entry (the chain's head; publish it with `entries` to pin the log).
    pub head: String,
    /// The key's fingerprint, when the chain is keyed.
    pub key_fingerprint: Option<String>,
    /// The first keyed entry (entries before it are SHA-256 only), when the chain is keyed.
    pub keyed_from: Option<i64>,
    /// Experiments checked against the log.
    pub experiments: u64,
    /// Decision rows checked.
    pub decisions: u64,
    /// Recorded rewards (abandonments included) checked.
    pub rewards: u64,
    /// Settled ledger rows (`charged`, `lost`) checked.
    pub charges: u64,
    /// Ledger rows of status `intent` (settled as `lost` at the next start).
    pub open_intents: u64,
    /// Experiments whose client-token hash the log cannot check (created before the log recorded
    /// token hashes).
    pub tokens_unchecked: Vec<String>,
}

/// Verify the database at `path` read-only (`dpbandits audit-log verify`).
///
/// # Errors
/// What does not verify, naming the entry, the row or the counter and what differs.
pub fn verify(path: &Path, key: Option<&AuditKey>, expect: &Expect) -> Result<Report> {
    let conn = store::open_read_only(path)?;
    let has_audit: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'audit'",
            [],
            |r| r.get(0),
        )
        .with_context(|| format!("--db {}: not an SQLite database", path.display()))?;
    if has_audit == 0 {
        bail!(
            "--db {}: no audit table (not a dpbandits-serve database)",
            path.display()
        );
    }
    verify_conn(&conn, key, expect)
}

/// The key for verifying `db`: `file`, or `<db>.audit-key` when it exists; `None` when neither
/// is given nor there (an unkeyed database verifies without one; a keyed one is refused).
///
/// # Errors
/// The key file cannot be read or does not hold a key.
pub fn key_for(db: &Path, file: Option<&Path>) -> Result<Option<AuditKey>> {
    match file {
        Some(f) => Ok(Some(AuditKey::load(f)?)),
        None => {
            let p = store::default_key_path(db);
            if p.exists() {
                Ok(Some(AuditKey::load(&p)?))
            } else {
                Ok(None)
            }
        }
    }
}

/// [`verify`] with the default key ([`key_for`]) and no pins: what tests and the start-up
/// check of a copy use.
///
/// # Errors
/// See [`verify`].
pub fn verify_default(db: &Path) -> Result<Report> {
    verify(db, key_for(db, None)?.as_ref(), &Expect::default())
}

/// Per experiment, what the log says.
#[derive(Debug, Default)]
struct Seen {
    /// `(seq, kind, arms)` of the `create` entry.
    created: Option<(i64, String, u64)>,
    /// The last client-token hash recorded and its entry (`None`: none recorded).
    token: Option<(String, i64)>,
    /// The log's token record is incomplete (a create or rotation without `token_sha256`).
    token_unknown: bool,
    decisions: u64,
    rewards: u64,
    releases: u64,
    charges: u64,
    /// `(decision id, reward)` of each `late-outcome` entry (late outcomes of abandoned
    /// decisions: few, so kept whole).
    late: Vec<(u64, f64)>,
}

fn field<'a>(body: &'a Value, key: &str, seq: i64) -> Result<&'a Value> {
    body.get(key)
        .with_context(|| format!("audit entry seq = {seq}: its body has no {key:?}"))
}

fn as_u64(v: &Value, key: &str, seq: i64) -> Result<u64> {
    field(v, key, seq)?
        .as_u64()
        .with_context(|| format!("audit entry seq = {seq}: {key} is not a count"))
}

fn as_f64(v: &Value, key: &str, seq: i64) -> Result<f64> {
    field(v, key, seq)?
        .as_f64()
        .with_context(|| format!("audit entry seq = {seq}: {key} is not a number"))
}

/// How far the verification running in this process has come (the start-up check's progress,
/// answered by `/v1/health` while the service is verifying).
pub mod progress {
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
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((crate::store::now(), entries));
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
}

/// See [`progress::startup_state`].
pub fn startup_state() -> Value {
    progress::startup_state()
}

/// Verify an open connection (the service's start-up self-check uses its own connection).
///
/// # Errors
/// See [`verify`].
pub fn verify_conn(conn: &Connection, key: Option<&AuditKey>, expect: &Expect) -> Result<Report> {
    let keying = store::audit_keying(conn)?;
    let entries_total: i64 = conn.query_row("SELECT COUNT(*) FROM audit", [], |r| r.get(0))?;
    progress::start(entries_total);
    match (&keying, key) {
        (Some((f, from)), None) => bail!(
            "the audit log is keyed (key fingerprint {f}, from entry {from}): give its key (--audit-key-file)"
        ),
        (Some((f, _)), Some(k)) if *f != k.fingerprint() => bail!(
            "the audit log is keyed with the key of fingerprint {f}; the key given has fingerprint {}",
            k.fingerprint()
        ),
        (Some((_, from)), Some(_)) if *from < 1 || *from > entries_total.max(0) + 1 => bail!(
            "meta audit_keyed_from = {from}: the log has {entries_total} entries (a keyed log starts keying at an entry it has)"
        ),
        (None, Some(k)) if entries_total > 0 => bail!(
            "a key (fingerprint {}) was given but the database says its audit log is not keyed (its meta rows audit_key and audit_keyed_from are missing)",
            k.fingerprint()
        ),
        _ => {}
    }
    let keyed_from = keying.as_ref().map(|x| x.1);

    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut decision_row = conn.prepare(
        "SELECT arm, actions, reward, admitted, outcome FROM decisions WHERE experiment = ?1 AND id = ?2",
    )?;
    let mut ledger_row = conn.prepare(
        "SELECT experiment, release, arm, measure, cost, status FROM ledger WHERE id = ?1",
    )?;
    let mut stmt = conn
        .prepare("SELECT seq, ts, experiment, event, body, prev, hash FROM audit ORDER BY seq")?;
    let mut rows = stmt.query([])?;
    let mut prev_hash = GENESIS.to_string();
    let mut expect_seq = 1i64;
    let mut pinned = false;
    while let Some(r) = rows.next()? {
        let seq: i64 = r.get(0)?;
        progress::entry(seq);
        let (ts, exp, event, body, prev, hash): (String, String, String, String, String, String) = (
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
        );
        if seq != expect_seq {
            bail!("audit entry seq = {seq}: expected seq = {expect_seq} (an entry is missing)");
        }
        if prev != prev_hash {
            bail!(
                "audit entry seq = {seq}: prev = {prev} does not match the hash of entry {} ({prev_hash})",
                seq - 1
            );
        }
        let keyed = keyed_from.is_some_and(|from| seq >= from);
        let want = match (keyed, key) {
            (true, Some(k)) => k.entry_hash(&prev, seq, &ts, &exp, &event, &body),
            _ => store::entry_hash(&prev, seq, &ts, &exp, &event, &body),
        };
        if hash != want {
            bail!(
                "audit entry seq = {seq}: hash = {hash}, but its contents {} to {want} (the entry was changed, or forged without the key)",
                if keyed { "HMAC under the key" } else { "hash" }
            );
        }
        if let (Some(h), Some(n)) = (&expect.head, expect.entries)
            && seq as u64 == n
        {
            if hash != *h {
                bail!(
                    "audit entry seq = {seq}: hash {hash}, but the published head says entry {n} is {h} (the log was rewritten)"
                );
            }
            pinned = true;
        } else if let (Some(h), None) = (&expect.head, expect.entries)
            && hash == *h
        {
            pinned = true;
        }
        let body: Value = serde_json::from_str(&body)
            .with_context(|| format!("audit entry seq = {seq}: its body is not JSON"))?;
        if keyed_from == Some(seq)
            && seq > 1
            && !(event == "config"
                && body.get("action").and_then(Value::as_str) == Some("audit-key")
                && body.get("keyed_from").and_then(Value::as_i64) == Some(seq))
        {
            bail!(
                "meta audit_keyed_from = {seq}, but entry {seq} is not the audit-key entry that starts keying"
            );
        }
        check_entry(
            &mut seen,
            &mut decision_row,
            &mut ledger_row,
            seq,
            &exp,
            &event,
            &body,
        )?;
        prev_hash = hash;
        expect_seq += 1;
    }
    let n = (expect_seq - 1) as u64;
    if let Some(want) = expect.entries
        && n < want
    {
        bail!(
            "the log has {n} entries; the published head says it had {want} (entries were deleted from its end)"
        );
    }
    if let Some(h) = &expect.head
        && !pinned
    {
        bail!(
            "no entry of the log has the published head {h} (the log was truncated or rewritten)"
        );
    }
    let mut report = Report {
        entries: n,
        head: prev_hash,
        key_fingerprint: keying.as_ref().map(|x| x.0.clone()),
        keyed_from,
        experiments: 0,
        decisions: 0,
        rewards: 0,
        charges: 0,
        open_intents: 0,
        tokens_unchecked: Vec::new(),
    };
    check_tables(conn, &seen, &mut report)?;
    Ok(report)
}

/// Check one audit entry against the row it describes.
#[allow(clippy::too_many_arguments)]
fn check_entry(
    seen: &mut BTreeMap<String, Seen>,
    decision_row: &mut rusqlite::Statement<'_>,
    ledger_row: &mut rusqlite::Statement<'_>,
    seq: i64,
    exp: &str,
    event: &str,
    body: &Value,
) -> Result<()> {
    if exp.is_empty() {
        return Ok(()); // database-wide entries (the audit key)
    }
    let s = seen.entry(exp.to_string()).or_default();
    if s.created.is_none() && !(event == "config" && body["action"] == "create") {
        bail!(
            "audit entry seq = {seq}: {event} of experiment {exp:?} before its create entry (entries were deleted)"
        );
    }
    match event {
        "config" => match body.get("action").and_then(Value::as_str) {
            Some("create") => {
                if let Some((first, _, _)) = &s.created {
                    bail!(
                        "audit entry seq = {seq}: a second create entry of experiment {exp:?} (the first is entry {first})"
                    );
                }
                let kind = field(body, "kind", seq)?
                    .as_str()
                    .with_context(|| format!("audit entry seq = {seq}: kind is not a string"))?;
                s.created = Some((seq, kind.to_string(), as_u64(body, "arms", seq)?));
                match body.get("token_sha256").and_then(Value::as_str) {
                    Some(t) => s.token = Some((t.to_string(), seq)),
                    None => s.token_unknown = true,
                }
            }
            Some("rotate-token") => match body.get("token_sha256").and_then(Value::as_str) {
                Some(t) => {
                    s.token = Some((t.to_string(), seq));
                    s.token_unknown = false;
                }
                None => s.token_unknown = true,
            },
            _ => {}
        },
        "decision" => {
            let id = as_u64(body, "decision_id", seq)?;
            let arm = as_u64(body, "arm", seq)?;
            let row: Option<(i64, Option<String>)> = decision_row
                .query_row(params![exp, id as i64], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let Some((row_arm, actions)) = row else {
                bail!(
                    "audit entry seq = {seq}: decision {id} of experiment {exp:?} is not in the decisions table (deleted)"
                );
            };
            if row_arm as u64 != arm {
                bail!(
                    "decisions: experiment {exp:?} decision {id} has arm {row_arm}, the log (entry {seq}) says {arm}"
                );
            }
            let logged = body.get("actions_sha256").and_then(Value::as_str);
            let stored = actions.as_deref().map(|a| store::sha256_hex(a.as_bytes()));
            if logged != stored.as_deref() {
                bail!(
                    "decisions: experiment {exp:?} decision {id}: its action set hashes to {stored:?}, the log (entry {seq}) says {logged:?}"
                );
            }
            s.decisions += 1;
        }
        "reward" | "abandon" => {
            let id = as_u64(body, "decision_id", seq)?;
            let reward = as_f64(body, "reward", seq)?;
            type Row = (Option<f64>, Option<f64>, Option<String>);
            let row: Option<Row> = decision_row
                .query_row(params![exp, id as i64], |r| {
                    Ok((r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .optional()?;
            let Some((stored, admitted, outcome)) = row else {
                bail!(
                    "audit entry seq = {seq}: the {event} of decision {id} of experiment {exp:?}, which is not in the decisions table (deleted)"
                );
            };
            let Some(stored) = stored else {
                bail!(
                    "decisions: experiment {exp:?} decision {id} has no reward, but the log (entry {seq}) records its {event} ({reward}): the reward was removed"
                );
            };
            if stored.to_bits() != reward.to_bits() {
                bail!(
                    "decisions: experiment {exp:?} decision {id} has reward {stored}, the log (entry {seq}) says {reward}"
                );
            }
            if let Some(a) = body.get("admitted").and_then(Value::as_f64)
                && admitted.map(f64::to_bits) != Some(a.to_bits())
            {
                bail!(
                    "decisions: experiment {exp:?} decision {id} has admitted reward {admitted:?}, the log (entry {seq}) says {a}"
                );
            }
            let want = if event == "abandon" {
                "abandoned"
            } else {
                "reward"
            };
            if outcome.as_deref().is_some_and(|o| o != want)
                || (event == "abandon" && outcome.is_none())
            {
                bail!(
                    "decisions: experiment {exp:?} decision {id} has outcome {outcome:?}, the log (entry {seq}) says {want:?}"
                );
            }
            s.rewards += 1;
        }
        "late-outcome" => {
            let id = as_u64(body, "decision_id", seq)?;
            let reward = as_f64(body, "reward", seq)?;
            if s.late.iter().any(|&(d, _)| d == id) {
                bail!(
                    "audit entry seq = {seq}: a second late outcome of decision {id} of experiment {exp:?}"
                );
            }
            s.late.push((id, reward));
        }
        "release" => s.releases += 1,
        "budget-charge" => {
            let id = field(body, "ledger_id", seq)?
                .as_i64()
                .with_context(|| format!("audit entry seq = {seq}: ledger_id is not an integer"))?;
            type Row = (String, i64, i64, String, f64, String);
            let row: Option<Row> = ledger_row
                .query_row([id], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                })
                .optional()?;
            let Some((lexp, release, arm, measure, cost, status)) = row else {
                bail!(
                    "audit entry seq = {seq}: ledger row {id} of experiment {exp:?} is not in the ledger table (deleted)"
                );
            };
            let logged_status = field(body, "status", seq)?.as_str().unwrap_or("");
            let logged_cost = as_f64(body, "cost", seq)?;
            let mismatch = lexp != exp
                || Some(release) != body.get("release").and_then(Value::as_i64)
                || Some(arm) != body.get("arm").and_then(Value::as_i64)
                || cost.to_bits() != logged_cost.to_bits()
                || status != logged_status
                || body
                    .get("measure")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m != measure);
            if mismatch {
                bail!(
                    "ledger: row {id} is (experiment {lexp:?}, release {release}, arm {arm}, {measure} {cost}, {status}); the log (entry {seq}) says {body}"
                );
            }
            s.charges += 1;
        }
        _ => {}
    }
    Ok(())
}

/// The late outcomes stored with the decisions (`late_reward`) are exactly those the log's
/// `late-outcome` entries record, bit for bit, and each is of an abandoned decision. A
/// database without the column (made before late outcomes were stored) must have no such entry.
fn check_late(conn: &Connection, seen: &BTreeMap<String, Seen>) -> Result<()> {
    let has_column: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('decisions') WHERE name = 'late_reward'",
        [],
        |r| r.get(0),
    )?;
    let mut stored: BTreeMap<String, Vec<(u64, f64, Option<String>)>> = BTreeMap::new();
    if has_column == 1 {
        let mut stmt = conn.prepare(
            "SELECT experiment, id, late_reward, outcome FROM decisions WHERE late_reward IS NOT NULL ORDER BY experiment, id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)? as u64,
                r.get::<_, f64>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })?;
        for row in rows {
            let (exp, id, reward, outcome) = row?;
            stored.entry(exp).or_default().push((id, reward, outcome));
        }
    }
    let empty = Vec::new();
    for (exp, s) in seen {
        let mut logged = s.late.clone();
        logged.sort_by_key(|x| x.0);
        let rows = stored.get(exp).unwrap_or(&empty);
        if has_column == 0 && !logged.is_empty() {
            bail!(
                "decisions: the table has no late_reward column, but the log records {} late outcome(s) of experiment {exp:?}",
                logged.len()
            );
        }
        for (i, &(id, reward)) in logged.iter().enumerate() {
            match rows.get(i) {
                Some((sid, sr, outcome)) if *sid == id && sr.to_bits() == reward.to_bits() => {
                    if outcome.as_deref() != Some("abandoned") {
                        bail!(
                            "decisions: experiment {exp:?} decision {id} has a late outcome but its outcome is {outcome:?}, not \"abandoned\""
                        );
                    }
                }
                other => bail!(
                    "decisions: experiment {exp:?}: the log records late outcome {reward} of decision {id}; the table has {:?}",
                    other.map(|x| (x.0, x.1))
                ),
            }
        }
        if rows.len() > logged.len() {
            let (id, r, _) = &rows[logged.len()];
            bail!(
                "decisions: experiment {exp:?} decision {id} has late outcome {r}, which the log does not record"
            );
        }
    }
    for exp in stored.keys() {
        if !seen.contains_key(exp) {
            bail!("decisions: experiment {exp:?} has late outcomes but no entry in the log");
        }
    }
    Ok(())
}

/// Check the tables against what the log says (counts per experiment, counters, tokens).
fn check_tables(
    conn: &Connection,
    seen: &BTreeMap<String, Seen>,
    report: &mut Report,
) -> Result<()> {
    let counts = |sql: &str| -> Result<BTreeMap<String, u64>> {
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    };
    let decisions = counts("SELECT experiment, COUNT(*) FROM decisions GROUP BY experiment")?;
    let rewarded = counts(
        "SELECT experiment, COUNT(*) FROM decisions WHERE reward IS NOT NULL GROUP BY experiment",
    )?;
    let charges = counts(
        "SELECT experiment, COUNT(*) FROM ledger WHERE status != 'intent' GROUP BY experiment",
    )?;
    let intents = counts(
        "SELECT experiment, COUNT(*) FROM ledger WHERE status = 'intent' GROUP BY experiment",
    )?;
    let mut stmt = conn.prepare(
        "SELECT name, kind, arms, token_hash, issued, observed, releases, snapshot FROM experiments ORDER BY name",
    )?;
    type Row = (String, String, i64, String, i64, i64, i64, Vec<u8>);
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<Row>>>()?;
    check_late(conn, seen)?;
    let mut names = std::collections::BTreeSet::new();
    for (name, kind, arms, token_hash, issued, observed, releases, snapshot) in rows {
        let Some(s) = seen.get(&name).filter(|s| s.created.is_some()) else {
            bail!("experiments: {name:?} has no create entry in the audit log");
        };
        let (seq, lkind, larms) = s.created.as_ref().expect("filtered");
        if *lkind != kind || *larms != arms as u64 {
            bail!(
                "experiments: {name:?} is kind {kind:?} with {arms} arms; its create entry (seq {seq}) says kind {lkind:?} with {larms} arms"
            );
        }
        let table = |m: &BTreeMap<String, u64>| m.get(&name).copied().unwrap_or(0);
        for (what, table_n, log_n) in [
            ("decision rows", table(&decisions), s.decisions),
            ("decisions with a reward", table(&rewarded), s.rewards),
            ("settled ledger rows", table(&charges), s.charges),
        ] {
            if table_n != log_n {
                bail!(
                    "{name:?}: {table_n} {what} in the tables, {log_n} in the audit log (rows were added or entries deleted)"
                );
            }
        }
        for (what, counter, log_n) in [
            ("issued", issued, s.decisions),
            ("observed", observed, s.rewards),
            ("releases", releases, s.releases),
        ] {
            if counter as u64 != log_n {
                bail!(
                    "experiments: {name:?} has counter {what} = {counter}; the audit log explains {log_n}"
                );
            }
        }
        match (&s.token, s.token_unknown) {
            (Some((t, seq)), false) if *t != token_hash => bail!(
                "experiments: {name:?} has client-token hash {token_hash}; the log's last token record (entry {seq}) says {t} (the token hash was replaced, or later entries of the log removed)"
            ),
            (_, true) | (None, _) => report.tokens_unchecked.push(name.clone()),
            _ => {}
        }
        if dpbandits::session::Session::is_session_snapshot(&snapshot) {
            let session = dpbandits::session::Session::restore(&snapshot)
                .with_context(|| format!("experiments: {name:?}: its snapshot does not restore"))?;
            if session.issued() != s.decisions || session.t() != s.rewards {
                bail!(
                    "experiments: {name:?}: its session snapshot has {} decisions issued and {} rewards observed; the audit log explains {} and {}",
                    session.issued(),
                    session.t(),
                    s.decisions,
                    s.rewards
                );
            }
        }
        report.experiments += 1;
        report.decisions += s.decisions;
        report.rewards += s.rewards;
        report.charges += s.charges;
        report.open_intents += table(&intents);
        names.insert(name);
    }
    for (name, s) in seen {
        if let Some((seq, _, _)) = &s.created
            && !names.contains(name)
        {
            bail!(
                "experiments: {name:?} was created (audit entry {seq}) but is not in the experiments table (deleted)"
            );
        }
    }
    for (what, m) in [
        ("decisions", &decisions),
        ("ledger", &charges),
        ("ledger", &intents),
    ] {
        if let Some(name) = m.keys().find(|n| !names.contains(*n)) {
            bail!("{what}: rows of experiment {name:?}, which does not exist");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{CreateRequest, Service};
    use serde_json::json;

    const ADMIN: &str = "verify-admin-token-0123456789";

    /// A database with two private experiments: rewards, abandonments, releases charged to the
    /// ledger, a token rotation and a pending decision. Returns the directory (the database and
    /// its default key file) and the published pin (entries, head).
    fn sample() -> (tempfile::TempDir, std::path::PathBuf, u64, String) {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("trial.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        for name in ["a", "b"] {
            let req: CreateRequest = serde_json::from_value(json!({"name": name, "arms": 3,
                "policy": {"kind": "adac_ucb", "rho": 0.5}, "dropout_reward": 0.0}))
            .unwrap();
            s.create(req).unwrap();
            for i in 0..30u64 {
                let d = s.decide(name, None, None).unwrap();
                let id = d["decision_id"].as_u64().unwrap();
                if i % 7 == 3 {
                    s.abandon(name, id).unwrap();
                } else {
                    s.reward(name, id, (i % 5) as f64 / 4.0).unwrap();
                }
            }
        }
        s.rotate_token("a", "test").unwrap();
        s.decide("b", None, None).unwrap();
        drop(s);
        let r = verify_default(&db).unwrap();
        assert!(
            r.charges > 4 && r.rewards == 60 && r.decisions == 61,
            "{r:?}"
        );
        assert!(r.tokens_unchecked.is_empty());
        (dir, db, r.entries, r.head)
    }

    /// Copy `db` and its key into a fresh directory, apply `sql` (triggers dropped) and
    /// optionally `edit` on the copy.
    fn tampered(
        db: &Path,
        sql: &str,
        edit: impl FnOnce(&Connection),
    ) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy.sqlite");
        crate::store::backup(db, &copy, key_for(db, None).unwrap().as_ref()).unwrap();
        std::fs::copy(store::default_key_path(db), store::default_key_path(&copy)).unwrap();
        let conn = Connection::open(&copy).unwrap();
        conn.execute_batch(
            "DROP TRIGGER IF EXISTS audit_no_update; DROP TRIGGER IF EXISTS audit_no_delete;",
        )
        .unwrap();
        conn.execute_batch(sql).unwrap();
        edit(&conn);
        drop(conn);
        (dir, copy)
    }

    /// Recompute every hash from entry `from` on with plain SHA-256 (what someone without the key
    /// can do after an edit).
    fn rechain(conn: &Connection, from: i64) {
        let mut prev: String = conn
            .query_row("SELECT hash FROM audit WHERE seq = ?1", [from - 1], |r| {
                r.get(0)
            })
            .unwrap();
        let rows: Vec<(i64, String, String, String, String)> = conn
            .prepare(
                "SELECT seq, ts, experiment, event, body FROM audit WHERE seq >= ?1 ORDER BY seq",
            )
            .unwrap()
            .query_map([from], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        for (seq, ts, exp, event, body) in rows {
            let h = store::entry_hash(&prev, seq, &ts, &exp, &event, &body);
            conn.execute(
                "UPDATE audit SET prev = ?2, hash = ?3 WHERE seq = ?1",
                params![seq, prev, h],
            )
            .unwrap();
            prev = h;
        }
    }

    /// Every tampering of the list, each on a fresh copy: `verify` with the key and the
    /// published head fails naming what is wrong, and the service refuses to start.
    #[test]
    fn every_tampering_is_detected_and_refused() {
        let (_dir, db, entries, head) = sample();
        let key = key_for(&db, None).unwrap().unwrap();
        let pin = Expect {
            head: Some(head.clone()),
            entries: Some(entries),
        };
        let sha = store::sha256_hex(b"another token");
        type Edit = Box<dyn FnOnce(&Connection)>;
        let none = || -> Edit { Box::new(|_: &Connection| {}) };
        let cases: Vec<(&str, String, Edit, &str, &str)> = vec![
            // (what, SQL, edit, verify with the pin says, the start-up check says)
            (
                "the last 40 entries deleted",
                "DELETE FROM audit WHERE seq > (SELECT MAX(seq) - 40 FROM audit)".into(),
                none(),
                "deleted from its end",
                "log",
            ),
            (
                "every entry deleted",
                "DELETE FROM audit".into(),
                none(),
                "deleted from its end",
                "has no create entry",
            ),
            (
                "an entry edited and every later hash recomputed",
                "UPDATE audit SET body = replace(body, '\"reward\":0.5', '\"reward\":1.0') WHERE seq = (SELECT MIN(seq) FROM audit WHERE event = 'reward' AND body LIKE '%\"reward\":0.5%')".into(),
                Box::new(|c: &Connection| {
                    let seq: i64 = c
                        .query_row(
                            "SELECT MIN(seq) FROM audit WHERE event = 'reward' AND body LIKE '%\"reward\":1.0%'",
                            [],
                            |r| r.get(0),
                        )
                        .unwrap();
                    rechain(c, seq);
                }),
                "HMAC under the key",
                "HMAC under the key",
            ),
            (
                "a forged, correctly chained entry appended",
                String::new(),
                Box::new(|c: &Connection| {
                    let (seq, prev): (i64, String) = c
                        .query_row("SELECT MAX(seq) + 1, (SELECT hash FROM audit ORDER BY seq DESC LIMIT 1) FROM audit", [], |r| Ok((r.get(0)?, r.get(1)?)))
                        .unwrap();
                    let (ts, body) = ("2026-11-27T00:00:00.000000Z", "{\"action\":\"rotate-token\",\"why\":\"x\"}");
                    let h = store::entry_hash(&prev, seq, ts, "a", "config", body);
                    c.execute(
                        "INSERT INTO audit (seq, ts, experiment, event, body, prev, hash) VALUES (?1, ?2, 'a', 'config', ?3, ?4, ?5)",
                        params![seq, ts, body, prev, h],
                    )
                    .unwrap();
                }),
                "HMAC under the key",
                "HMAC under the key",
            ),
            (
                "a reward edited in decisions",
                "UPDATE decisions SET reward = 0.125 WHERE experiment = 'a' AND id = 5".into(),
                none(),
                "decision 5 has reward 0.125",
                "decision 5 has reward 0.125",
            ),
            (
                "a reward set back to NULL (it would be applied twice)",
                "UPDATE decisions SET reward = NULL, admitted = NULL, outcome = NULL WHERE experiment = 'b' AND id = 7".into(),
                none(),
                "decision 7 has no reward",
                "decision 7 has no reward",
            ),
            (
                "a decision row deleted",
                "DELETE FROM decisions WHERE experiment = 'a' AND id = 30".into(),
                none(),
                "not in the decisions table",
                "not in the decisions table",
            ),
            (
                "a decision row added",
                "INSERT INTO decisions (experiment, id, arm, round, issued) VALUES ('a', 99, 0, 98, 'x')".into(),
                none(),
                "decision rows in the tables",
                "decision rows in the tables",
            ),
            (
                "a ledger charge halved",
                "UPDATE ledger SET cost = cost / 2 WHERE id = (SELECT MIN(id) FROM ledger)".into(),
                none(),
                "ledger: row",
                "ledger: row",
            ),
            (
                "a ledger row deleted",
                "DELETE FROM ledger WHERE id = (SELECT MAX(id) FROM ledger WHERE status = 'charged')".into(),
                none(),
                "not in the ledger table",
                "not in the ledger table",
            ),
            (
                "a counter of experiments changed",
                "UPDATE experiments SET issued = issued - 1 WHERE name = 'b'".into(),
                none(),
                "counter issued",
                "counter issued",
            ),
            (
                "an experiment deleted",
                "DELETE FROM experiments WHERE name = 'a'".into(),
                none(),
                "not in the experiments table",
                "not in the experiments table",
            ),
            (
                "a client-token hash replaced",
                format!("UPDATE experiments SET token_hash = '{sha}' WHERE name = 'a'"),
                none(),
                "client-token hash",
                "client-token hash",
            ),
            (
                "the key's meta rows removed (the log claimed unkeyed)",
                "DELETE FROM meta WHERE key IN ('audit_key', 'audit_keyed_from')".into(),
                none(),
                "not keyed",
                "contents hash to",
            ),
        ];
        for (what, sql, edit, says, start_says) in cases {
            let (_d, copy) = tampered(&db, &sql, edit);
            let e = verify(&copy, Some(&key), &pin)
                .map(|r| format!("verified: {r:?}"))
                .unwrap_or_else(|e| format!("{e:#}"));
            assert!(e.contains(says), "{what}: verify says {e}");
            let e = Service::open(&copy, ADMIN)
                .map(|_| "started".to_string())
                .unwrap_or_else(|e| format!("{e:#}"));
            assert!(
                e.contains("refusing to start") && e.contains(start_says),
                "{what}: the service says {e}"
            );
        }
        // The untouched copy verifies with the pin, and the service starts on it.
        let (_d, copy) = tampered(&db, "", |_| {});
        assert_eq!(verify(&copy, Some(&key), &pin).unwrap().head, head);
        assert!(Service::open(&copy, ADMIN).is_ok());
        // A log that grew after the pin still verifies against it; a wrong pin does not.
        let wrong = Expect {
            head: Some(store::sha256_hex(b"x")),
            entries: Some(entries - 1),
        };
        let e = verify(&copy, Some(&key), &wrong).unwrap_err().to_string();
        assert!(e.contains("the log was rewritten"), "{e}");
    }

    /// A keyed database without its key, or with another key, is refused (never re-keyed).
    #[test]
    fn a_keyed_database_needs_its_key() {
        let (_dir, db, _, _) = sample();
        let other = tempfile::tempdir().unwrap();
        let wrong = other.path().join("other.key");
        std::fs::write(
            &wrong,
            format!("{}\n", AuditKey::generate().unwrap().to_hex()),
        )
        .unwrap();
        let e = Service::open_keyed(&db, ADMIN, Some(&wrong))
            .map(|_| ())
            .unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("fingerprint"), "{e}");
        let e = verify(
            &db,
            Some(&AuditKey::load(&wrong).unwrap()),
            &Expect::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("fingerprint"), "{e}");
        let e = verify(&db, None, &Expect::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("give its key"), "{e}");
        let missing = other.path().join("missing.key");
        let e = Service::open_keyed(&db, ADMIN, Some(&missing))
            .map(|_| ())
            .unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("no such file") && !missing.exists(), "{e}");
        // The key file is created 0600.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(store::default_key_path(&db))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
