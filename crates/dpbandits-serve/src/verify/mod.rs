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

use crate::store::{self, Action, AuditKey, Event, GENESIS};
use anyhow::{Context, Result, bail};
use dpbandits::session::Session;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The format of the entries this build writes. 2: a `create` entry pins every configuration
/// value the service reads back (`params`, `while_pending`, `label`, with `guarantee`,
/// `dropout_reward`, `reward_deadline`), a `decision` entry every column of its row the service
/// reads back (`issued_unix`, `request_id`, `propensity`, with `arm` and `actions_sha256`).
/// An experiment created by an earlier build gets one `pin` entry (`config`, `"action":
/// "pin"`) at the first start of this build: those values as they stood, and a digest of its
/// earlier decisions' `request_id`, `propensity` and `issued_unix` ([`store::Reads::decisions_digest`]).
pub const LOG_FORMAT: u64 = 2;

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
    /// Experiments created by an earlier build whose log does not pin their parameters
    /// (`params`, `while_pending`) nor their earlier decisions' `request_id`, `propensity` and
    /// `issued_unix` yet: the next `serve` start pins them as they stand (a `pin` entry).
    pub unpinned: Vec<String>,
}

/// Verify the database at `path` read-only (`dpbandits audit-log verify`).
///
/// # Errors
/// What does not verify, naming the entry, the row or the counter and what differs.
pub fn verify(path: &Path, key: Option<&AuditKey>, expect: &Expect) -> Result<Report> {
    let conn = store::Store::open_read_only(path)?;
    let has_audit = conn
        .has_audit_table()
        .with_context(|| format!("--db {}: not an SQLite database", path.display()))?;
    if !has_audit {
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

/// Per experiment, what the log says (a checkpoint records it as of its entry).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
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
    /// The body of the `create` entry.
    create: Value,
    /// The `pin` entry of an experiment created by an earlier build: `(seq, body)`.
    pin: Option<(i64, Value)>,
    /// The largest decision id whose entry predates [`LOG_FORMAT`] 2 (no `issued_unix`).
    old_decisions: Option<u64>,
}

impl Seen {
    /// The entry that pins the configuration in full: the `create` entry of [`LOG_FORMAT`] 2,
    /// or the `pin` entry of an older experiment; `None`: not pinned yet.
    fn pins(&self) -> Option<(i64, &Value)> {
        match &self.pin {
            Some((seq, body)) => Some((*seq, body)),
            None => (self.create.get("format").and_then(Value::as_u64) >= Some(LOG_FORMAT))
                .then(|| (self.created.as_ref().map_or(0, |c| c.0), &self.create)),
        }
    }
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

mod checkpoint;
pub mod progress;
mod touched;

use touched::Touched;

pub use checkpoint::{Startup, startup_check};

/// See [`progress::startup_state`].
pub fn startup_state() -> Value {
    progress::startup_state()
}

/// Verify an open connection (the service's start-up self-check uses its own connection).
///
/// # Errors
/// See [`verify`].
pub fn verify_conn(conn: &store::Reads, key: Option<&AuditKey>, expect: &Expect) -> Result<Report> {
    walk(conn, key, expect, None, None).map(|w| w.report)
}

/// Where a walk of the log resumes: after entry `after` of hash `head`, with what the log said
/// up to there (a keyed checkpoint's).
struct Resume {
    after: i64,
    head: String,
    seen: BTreeMap<String, Seen>,
}

/// What a walk proved: the report, what the log says per experiment, and the rows the walked
/// entries describe.
struct Walked {
    report: Report,
    seen: BTreeMap<String, Seen>,
    touched: Touched,
    /// The tables' keyed digest (with a hasher; else the empty digest).
    digest: store::RowDigest,
}

/// Whether entry `seq` of hash `hash` is the published head `expect` names.
///
/// # Errors
/// Entry `expect.entries` has another hash (the log was rewritten).
fn pin_hit(expect: &Expect, seq: i64, hash: &str) -> Result<bool> {
    match (&expect.head, expect.entries) {
        (Some(h), Some(n)) if seq as u64 == n => {
            if hash != h {
                bail!(
                    "audit entry seq = {seq}: hash {hash}, but the published head says entry {n} is {h} (the log was rewritten)"
                );
            }
            Ok(true)
        }
        (Some(h), None) => Ok(hash == h),
        _ => Ok(false),
    }
}

/// Walk the log from entry 1 (`resume`: `None`) or after a checkpoint, checking each entry's
/// link and its row, then the tables against what the log says (their digest under `hasher`
/// taken in the same pass).
fn walk(
    conn: &store::Reads,
    key: Option<&AuditKey>,
    expect: &Expect,
    resume: Option<Resume>,
    hasher: Option<&store::RowHasher>,
) -> Result<Walked> {
    let keying = conn.audit_keying()?;
    let fast = resume.is_some();
    let entries_total = if fast {
        conn.audit_head()?.0 as i64
    } else {
        conn.audit_count()?
    };
    progress::start(entries_total);
    check_keying(keying.as_ref(), key, entries_total)?;
    let keyed_from = keying.as_ref().map(|x| x.1);
    let (after, mut prev_hash, mut seen) = match resume {
        Some(r) => (r.after, r.head, r.seen),
        None => (0, GENESIS.to_string(), BTreeMap::new()),
    };
    let mut rows = store::RowReader::new(conn)?;
    let mut touched = Touched::default();
    let mut expect_seq = after + 1;
    let mut pinned = false;
    conn.for_each_audit_entry_after(after, |entry| {
        let seq = entry.seq;
        progress::entry(seq);
        check_link(&entry, &prev_hash, expect_seq, keyed_from, key)?;
        pinned |= pin_hit(expect, seq, &entry.hash)?;
        let body: Value = serde_json::from_str(&entry.body)
            .with_context(|| format!("audit entry seq = {seq}: its body is not JSON"))?;
        let (exp, event) = (&entry.experiment, &entry.event);
        check_key_entry(seq, exp, event, &body, keyed_from)?;
        check_entry(&mut seen, &mut rows, seq, exp, event, &body)?;
        if fast {
            touched.record(exp, event, &body);
        }
        prev_hash = entry.hash;
        expect_seq += 1;
        Ok(())
    })?;
    let n = (expect_seq - 1) as u64;
    check_pins(expect, n, pinned)?;
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
        unpinned: Vec::new(),
    };
    let (counts, digest) = conn.table_scan(hasher)?;
    check_tables(conn, &seen, counts, &mut report)?;
    Ok(Walked {
        report,
        seen,
        touched,
        digest,
    })
}

/// One link of the chain: entry `expect_seq`, following `prev_hash`, its hash recomputed (HMAC
/// under `key` from `keyed_from` on, SHA-256 before).
fn check_link(
    entry: &store::AuditRow,
    prev_hash: &str,
    expect_seq: i64,
    keyed_from: Option<i64>,
    key: Option<&AuditKey>,
) -> Result<()> {
    let store::AuditRow {
        seq,
        ts,
        experiment: exp,
        event,
        body,
        prev,
        hash,
    } = entry;
    let seq = *seq;
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
        (true, Some(k)) => k.entry_hash(prev, seq, ts, exp, event, body),
        _ => store::entry_hash(prev, seq, ts, exp, event, body),
    };
    if *hash != want {
        bail!(
            "audit entry seq = {seq}: hash = {hash}, but its contents {} to {want} (the entry was changed, or forged without the key)",
            if keyed { "HMAC under the key" } else { "hash" }
        );
    }
    Ok(())
}

/// Keying starts at entry `keyed_from` only if that entry is the `audit-key` entry (or entry 1),
/// and an `audit-key` entry is only where keying starts.
fn check_key_entry(
    seq: i64,
    exp: &str,
    event: &str,
    body: &Value,
    keyed_from: Option<i64>,
) -> Result<()> {
    if keyed_from == Some(seq)
        && seq > 1
        && !(event == Event::Config.name()
            && Action::of(body) == Some(Action::AuditKey)
            && body.get("keyed_from").and_then(Value::as_i64) == Some(seq))
    {
        bail!(
            "meta audit_keyed_from = {seq}, but entry {seq} is not the audit-key entry that starts keying"
        );
    }
    if event == Event::Config.name()
        && exp.is_empty()
        && Action::of(body) == Some(Action::AuditKey)
        && keyed_from != Some(seq)
    {
        bail!(
            "audit entry seq = {seq} is the audit-key entry that starts keying, but meta audit_keyed_from = {keyed_from:?}: the keying was removed or moved"
        );
    }
    Ok(())
}

/// The key given against how `meta` says the chain is keyed: a keyed log needs its key, keying
/// starts at entry 1 or at an entry the log holds (the `audit-key` entry, checked in the walk),
/// and a key given for an unkeyed, non-empty log means its keying was removed.
fn check_keying(
    keying: Option<&(String, i64)>,
    key: Option<&AuditKey>,
    entries_total: i64,
) -> Result<()> {
    match (keying, key) {
        (Some((f, from)), None) => bail!(
            "the audit log is keyed (key fingerprint {f}, from entry {from}): give its key (--audit-key-file)"
        ),
        (Some((f, _)), Some(k)) if *f != k.fingerprint() => bail!(
            "the audit log is keyed with the key of fingerprint {f}; the key given has fingerprint {}",
            k.fingerprint()
        ),
        (Some((_, from)), _) if *from != 1 && (*from < 1 || *from > entries_total) => bail!(
            "meta audit_keyed_from = {from}: the log has {entries_total} entries; keying starts at entry 1 or at the audit-key entry the log holds (the keying start was moved, e.g. past the last entry so that a log re-hashed without the key passes)"
        ),
        (None, Some(k)) if entries_total > 0 => bail!(
            "a key (fingerprint {}) was given but the database says its audit log is not keyed (its meta rows audit_key and audit_keyed_from are missing): its keying was removed (and the chain re-hashed without the key), or the key is not this database's",
            k.fingerprint()
        ),
        _ => {}
    }
    Ok(())
}

/// The published head against the walk: the log has at least `expect.entries` entries and
/// holds the head (`pinned`: some entry, or entry `expect.entries`, had it).
fn check_pins(expect: &Expect, n: u64, pinned: bool) -> Result<()> {
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
    Ok(())
}

/// Check one audit entry against the row it describes.
#[allow(clippy::too_many_arguments)]
fn check_entry(
    seen: &mut BTreeMap<String, Seen>,
    rows: &mut store::RowReader<'_>,
    seq: i64,
    exp: &str,
    event: &str,
    body: &Value,
) -> Result<()> {
    if exp.is_empty() {
        return Ok(()); // database-wide entries (the audit key)
    }
    let s = seen.entry(exp.to_string()).or_default();
    let parsed = Event::parse(event);
    if s.created.is_none()
        && !(parsed == Some(Event::Config) && Action::of(body) == Some(Action::Create))
    {
        bail!(
            "audit entry seq = {seq}: {event} of experiment {exp:?} before its create entry (entries were deleted)"
        );
    }
    match parsed {
        Some(Event::Config) => seen_config(s, seq, exp, body),
        Some(Event::Decision) => seen_decision(s, rows, seq, exp, body),
        Some(e @ (Event::Reward | Event::Abandon)) => seen_reward(s, rows, seq, exp, e, body),
        Some(Event::Release) => {
            s.releases += 1;
            Ok(())
        }
        Some(Event::BudgetCharge) => seen_charge(s, rows, seq, exp, body),
        Some(Event::LateOutcome) => seen_late(s, seq, exp, body),
        _ => Ok(()),
    }
}

/// A `late-outcome` entry: kept whole (few), checked against the table by [`check_late`].
fn seen_late(s: &mut Seen, seq: i64, exp: &str, body: &Value) -> Result<()> {
    let id = as_u64(body, "decision_id", seq)?;
    let reward = as_f64(body, "reward", seq)?;
    if s.late.iter().any(|&(d, _)| d == id) {
        bail!(
            "audit entry seq = {seq}: a second late outcome of decision {id} of experiment {exp:?}"
        );
    }
    s.late.push((id, reward));
    Ok(())
}

/// A `config` entry: the create entry, a pin, a token rotation.
fn seen_config(s: &mut Seen, seq: i64, exp: &str, body: &Value) -> Result<()> {
    match Action::of(body) {
        Some(Action::Create) => {
            if let Some((first, _, _)) = &s.created {
                bail!(
                    "audit entry seq = {seq}: a second create entry of experiment {exp:?} (the first is entry {first})"
                );
            }
            let kind = field(body, "kind", seq)?
                .as_str()
                .with_context(|| format!("audit entry seq = {seq}: kind is not a string"))?;
            s.created = Some((seq, kind.to_string(), as_u64(body, "arms", seq)?));
            s.create = body.clone();
            match body.get("token_sha256").and_then(Value::as_str) {
                Some(t) => s.token = Some((t.to_string(), seq)),
                None => s.token_unknown = true,
            }
        }
        Some(Action::Pin) => {
            if let Some((first, _)) = s.pins() {
                bail!(
                    "audit entry seq = {seq}: a pin entry of experiment {exp:?}, whose configuration entry {first} already pins it"
                );
            }
            s.pin = Some((seq, body.clone()));
        }
        Some(Action::RotateToken) => match body.get("token_sha256").and_then(Value::as_str) {
            Some(t) => {
                s.token = Some((t.to_string(), seq));
                s.token_unknown = false;
            }
            None => s.token_unknown = true,
        },
        _ => {}
    }
    Ok(())
}

/// The late outcomes stored with the decisions (`late_reward`) are exactly those the log's
/// `late-outcome` entries record, bit for bit, and each is of an abandoned decision. A
/// database without the column (made before late outcomes were stored) must have no such entry.
fn check_late(conn: &store::Reads, seen: &BTreeMap<String, Seen>) -> Result<()> {
    let (has_column, stored) = match conn.late_outcomes()? {
        Some(rows) => (true, rows),
        None => (false, BTreeMap::new()),
    };
    let empty = Vec::new();
    for (exp, s) in seen {
        let mut logged = s.late.clone();
        logged.sort_by_key(|x| x.0);
        let rows = stored.get(exp).unwrap_or(&empty);
        if !has_column && !logged.is_empty() {
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

/// A `decision` entry against its row.
fn seen_decision(
    s: &mut Seen,
    rows: &mut store::RowReader<'_>,
    seq: i64,
    exp: &str,
    body: &Value,
) -> Result<()> {
    let id = as_u64(body, "decision_id", seq)?;
    let arm = as_u64(body, "arm", seq)?;
    let Some(store::CheckedDecision {
        arm: row_arm,
        actions,
        request_id,
        propensity,
        issued_unix,
        ..
    }) = rows.decision(exp, id)?
    else {
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
    if body.get("issued_unix").is_some() {
        check_decision_pins(body, exp, id, seq, request_id, propensity, issued_unix)?;
    } else if s.pins().is_some_and(|(first, _)| first < seq) {
        bail!(
            "audit entry seq = {seq}: decision {id} of experiment {exp:?} has no issued_unix, but the log pins every decision after entry {}",
            s.pins().map_or(0, |p| p.0)
        );
    } else {
        s.old_decisions = Some(s.old_decisions.unwrap_or(0).max(id));
    }
    s.decisions += 1;
    Ok(())
}

/// A `reward` or `abandon` entry against its decision row.
fn seen_reward(
    s: &mut Seen,
    rows: &mut store::RowReader<'_>,
    seq: i64,
    exp: &str,
    event: Event,
    body: &Value,
) -> Result<()> {
    let id = as_u64(body, "decision_id", seq)?;
    let reward = as_f64(body, "reward", seq)?;
    let Some(store::CheckedDecision {
        reward: stored,
        admitted,
        outcome,
        ..
    }) = rows.decision(exp, id)?
    else {
        bail!(
            "audit entry seq = {seq}: the {} of decision {id} of experiment {exp:?}, which is not in the decisions table (deleted)",
            event.name()
        );
    };
    let Some(stored) = stored else {
        bail!(
            "decisions: experiment {exp:?} decision {id} has no reward, but the log (entry {seq}) records its {} ({reward}): the reward was removed",
            event.name()
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
    let want = if event == Event::Abandon {
        "abandoned"
    } else {
        "reward"
    };
    if outcome.as_deref().is_some_and(|o| o != want)
        || (event == Event::Abandon && outcome.is_none())
    {
        bail!(
            "decisions: experiment {exp:?} decision {id} has outcome {outcome:?}, the log (entry {seq}) says {want:?}"
        );
    }
    s.rewards += 1;
    Ok(())
}

/// A `budget-charge` entry against its ledger row.
fn seen_charge(
    s: &mut Seen,
    rows: &mut store::RowReader<'_>,
    seq: i64,
    exp: &str,
    body: &Value,
) -> Result<()> {
    let id = field(body, "ledger_id", seq)?
        .as_i64()
        .with_context(|| format!("audit entry seq = {seq}: ledger_id is not an integer"))?;
    let Some(store::CheckedCharge {
        experiment: lexp,
        release,
        arm,
        measure,
        cost,
        status,
    }) = rows.ledger(id)?
    else {
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
    Ok(())
}

/// Check what the service reads back from an experiment's configuration row and its session
/// against its `create` entry: `dropout_reward` and `reward_deadline` (an entry without them
/// predates them: none), the problem, and the budget, boundary and noise grade of the
/// guarantee as the restored session reports it (the policy's own parameters: an edited `rho`
/// inside the snapshot shows here).
fn check_config(name: &str, s: &Seen, config: &str, session: Option<&Session>) -> Result<()> {
    let seq = s.created.as_ref().map_or(0, |c| c.0);
    let config: Value = serde_json::from_str(config)
        .with_context(|| format!("experiments: {name:?}: its config is not JSON"))?;
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).map(f64::to_bits);
    for key in ["dropout_reward", "reward_deadline"] {
        if num(&config, key) != num(&s.create, key)
            || config
                .get(key)
                .is_some_and(|v| !v.is_null() && !v.is_number())
        {
            bail!(
                "experiments: {name:?} has config {key} = {}; its create entry (seq {seq}) says {}",
                config.get(key).unwrap_or(&Value::Null),
                s.create.get(key).unwrap_or(&Value::Null)
            );
        }
    }
    if let Some(p) = s.create.get("problem")
        && config.get("problem") != Some(p)
    {
        bail!(
            "experiments: {name:?} has config problem = {}; its create entry (seq {seq}) says {p}",
            config.get("problem").unwrap_or(&Value::Null)
        );
    }
    let (Some(session), Some(logged)) = (session, s.create.get("guarantee")) else {
        return Ok(());
    };
    let g = session
        .guarantee()
        .map_err(anyhow::Error::from)
        .and_then(|g| Ok(serde_json::to_value(g)?))
        .with_context(|| format!("experiments: {name:?}: its session's guarantee"))?;
    for key in ["budget", "boundary", "noise"] {
        if let Some(want) = logged.get(key)
            && g.get(key) != Some(want)
        {
            bail!(
                "experiments: {name:?}: its session snapshot's policy has {key} {}; its create entry (seq {seq}) says {want} (the stored policy's parameters were changed)",
                g.get(key).unwrap_or(&Value::Null)
            );
        }
    }
    Ok(())
}

/// Check an experiment whose configuration the log pins in full ([`Seen::pins`]): the session's
/// parameters, label and `while_pending`, and for an experiment pinned by a `pin` entry the
/// digest of the decisions it covers.
fn check_pinned(
    conn: &store::Reads,
    name: &str,
    s: &Seen,
    session: Option<&Session>,
) -> Result<()> {
    let Some((seq, pins)) = s.pins() else {
        return Ok(());
    };
    if let Some(session) = session {
        let wp = serde_json::to_value(session.while_pending())?;
        for (key, value) in [
            ("params", session.params().map_or(Value::Null, Value::from)),
            (
                "label",
                Value::from(session.label().unwrap_or(session.kind())),
            ),
            ("while_pending", wp),
        ] {
            let want = pins.get(key).unwrap_or(&Value::Null);
            if *want != value {
                bail!(
                    "experiments: {name:?}: its session snapshot has {key} = {value}; the audit log (entry {seq}) says {want} (the stored session was changed)"
                );
            }
        }
    }
    let Some((pin_seq, pin)) = &s.pin else {
        return Ok(());
    };
    let upto = as_u64(pin, "decisions", *pin_seq)?;
    if let Some(old) = s.old_decisions
        && old > upto
    {
        bail!(
            "audit entry seq = {pin_seq}: the pin of experiment {name:?} covers decisions 1 to {upto}, but decision {old}'s entry predates it"
        );
    }
    let (n, digest) = conn.decisions_digest(name, upto)?;
    let want = pin.get("decisions_sha256").and_then(Value::as_str);
    if n != upto || want != Some(digest.as_str()) {
        bail!(
            "decisions: experiment {name:?}: the request ids, propensities and issue times of its decisions 1 to {upto} hash to {digest} ({n} rows); the pin entry (seq {pin_seq}) says {} (a row of an earlier build's decisions was changed)",
            want.unwrap_or("(none)")
        );
    }
    Ok(())
}

/// Check a decision row's `request_id`, `propensity` and `issued_unix` against its entry
/// ([`LOG_FORMAT`] 2): a missing key in the entry means `NULL` in the row.
fn check_decision_pins(
    body: &Value,
    exp: &str,
    id: u64,
    seq: i64,
    request_id: Option<String>,
    propensity: Option<f64>,
    issued_unix: Option<f64>,
) -> Result<()> {
    let logged_rid = body.get("request_id").and_then(Value::as_str);
    if logged_rid != request_id.as_deref() {
        bail!(
            "decisions: experiment {exp:?} decision {id} has request_id {request_id:?}, the log (entry {seq}) says {logged_rid:?} (a retry with that request id would get another decision)"
        );
    }
    let bits = |x: Option<f64>| x.map(f64::to_bits);
    for (what, row, logged) in [
        (
            "propensity",
            propensity,
            body.get("propensity").and_then(Value::as_f64),
        ),
        (
            "issued_unix",
            issued_unix,
            body.get("issued_unix").and_then(Value::as_f64),
        ),
    ] {
        if bits(row) != bits(logged) {
            bail!(
                "decisions: experiment {exp:?} decision {id} has {what} {row:?}, the log (entry {seq}) says {logged:?}"
            );
        }
    }
    Ok(())
}

/// The session restored from experiment `name`'s stored snapshot, its counters checked against
/// the log; `None` for a bare policy snapshot of a schema-1 database before its migration.
fn restored_session(
    conn: &store::Reads,
    name: &str,
    snapshot: &[u8],
    s: &Seen,
) -> Result<Option<Session>> {
    if dpbandits::session::Session::is_session_snapshot(snapshot) {
        let session = dpbandits::session::Session::restore(snapshot)
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
        Ok(Some(session))
    } else if conn.schema_version()? == store::SCHEMA_VERSION_POLICY_SNAPSHOTS {
        Ok(None) // a schema-1 database before its migration (bare policy snapshots)
    } else {
        bail!(
            "experiments: {name:?}: its snapshot is not a session snapshot (only a schema-1 database, before its migration, holds bare policy snapshots)"
        );
    }
}

/// Experiment `name`'s rows (decisions, rewarded decisions, settled ledger rows) and its
/// counters against the log's counts.
fn check_counts(name: &str, s: &Seen, rows: [u64; 3], counters: &store::Counters) -> Result<()> {
    for (what, table_n, log_n) in [
        ("decision rows", rows[0], s.decisions),
        ("decisions with a reward", rows[1], s.rewards),
        ("settled ledger rows", rows[2], s.charges),
    ] {
        if table_n != log_n {
            bail!(
                "{name:?}: {table_n} {what} in the tables, {log_n} in the audit log (rows were added or entries deleted)"
            );
        }
    }
    for (what, counter, log_n) in [
        ("issued", counters.issued, s.decisions),
        ("observed", counters.observed, s.rewards),
        ("releases", counters.releases, s.releases),
    ] {
        if counter != log_n {
            bail!(
                "experiments: {name:?} has counter {what} = {counter}; the audit log explains {log_n}"
            );
        }
    }
    Ok(())
}

/// Check the tables against what the log says (counts per experiment, counters, tokens).
fn check_tables(
    conn: &store::Reads,
    seen: &BTreeMap<String, Seen>,
    counts: store::TableCounts,
    report: &mut Report,
) -> Result<()> {
    let store::TableCounts {
        decisions,
        rewarded,
        charges,
        intents,
    } = counts;
    let rows = conn.load_experiments()?;
    check_late(conn, seen)?;
    let mut names = std::collections::BTreeSet::new();
    for row in rows {
        let store::ExperimentRow {
            name,
            kind,
            arms,
            token_hash,
            config,
            snapshot,
            counters,
        } = row;
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
        let rows = [table(&decisions), table(&rewarded), table(&charges)];
        check_counts(&name, s, rows, &counters)?;
        match (&s.token, s.token_unknown) {
            (Some((t, seq)), false) if *t != token_hash => bail!(
                "experiments: {name:?} has client-token hash {token_hash}; the log's last token record (entry {seq}) says {t} (the token hash was replaced, or later entries of the log removed)"
            ),
            (_, true) | (None, _) => report.tokens_unchecked.push(name.clone()),
            _ => {}
        }
        let session = restored_session(conn, &name, &snapshot, s)?;
        check_config(&name, s, &config, session.as_ref())?;
        match s.pins() {
            Some(_) => check_pinned(conn, &name, s, session.as_ref())?,
            None => report.unpinned.push(name.clone()),
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
    use rusqlite::{Connection, OptionalExtension, params};
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
                "policy": {"kind": "adac_ucb", "rho": 0.5}, "dropout_reward": 0.0,
                "reward_deadline": 3600.0}))
            .unwrap();
            s.create(req).unwrap();
            for i in 0..30u64 {
                let rid = (i % 3 == 0).then(|| format!("{name}-{i}"));
                let d = s.decide(name, rid, None).unwrap();
                let id = d["decision_id"].as_u64().unwrap();
                if i % 7 == 3 {
                    s.abandon(name, id).unwrap();
                } else {
                    s.reward(name, id, (i % 5) as f64 / 4.0).unwrap();
                }
            }
        }
        // A pipelined experiment, every reward in.
        let req: CreateRequest = serde_json::from_value(json!({"name": "c", "arms": 2,
            "policy": {"kind": "dp_ts", "epsilon": 1.0}, "while_pending": "pipeline"}))
        .unwrap();
        s.create(req).unwrap();
        for _ in 0..6 {
            let id = s.decide("c", None, None).unwrap()["decision_id"]
                .as_u64()
                .unwrap();
            s.reward("c", id, 1.0).unwrap();
        }
        s.rotate_token("a", "test").unwrap();
        s.decide("b", None, None).unwrap();
        drop(s);
        let r = verify_default(&db).unwrap();
        // A restart writes the keyed checkpoint here; what follows is its tail (the start-up
        // check of every copy below resumes after it: rows before and after it are tampered).
        let mut s = Service::open(&db, ADMIN).unwrap();
        for i in 0..4u64 {
            let id = s.decide("a", None, None).unwrap()["decision_id"]
                .as_u64()
                .unwrap();
            s.reward("a", id, i as f64 / 4.0).unwrap();
            let id = s.decide("c", None, None).unwrap()["decision_id"]
                .as_u64()
                .unwrap();
            s.reward("c", id, 0.0).unwrap();
        }
        s.decide("b", None, None).unwrap();
        drop(s);
        let conn = store::Store::open_read_only(&db).unwrap();
        let key = key_for(&db, None).unwrap().unwrap();
        let (after, _) = checkpoint::resume(&conn, &key).unwrap().unwrap();
        assert_eq!(after, r.entries, "the checkpoint is the restart's");
        let r = verify_default(&db).unwrap();
        assert!(
            r.charges > 4 && r.rewards == 74 && r.decisions == 76,
            "{r:?}"
        );
        assert!(r.tokens_unchecked.is_empty() && r.unpinned.is_empty());
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
        crate::backup::backup(db, &copy, key_for(db, None).unwrap().as_ref()).unwrap();
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
            .optional()
            .unwrap()
            .unwrap_or_else(|| GENESIS.to_string());
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

    /// Rewrite experiment `name`'s stored session snapshot (its CBOR envelope) with `f`.
    fn edit_snapshot(conn: &Connection, name: &str, f: impl FnOnce(&mut ciborium::Value)) {
        let bytes: Vec<u8> = conn
            .query_row(
                "SELECT snapshot FROM experiments WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap();
        let mut env: ciborium::Value = ciborium::from_reader(&bytes[..]).unwrap();
        f(&mut env);
        let mut out = vec![];
        ciborium::into_writer(&env, &mut out).unwrap();
        conn.execute(
            "UPDATE experiments SET snapshot = ?2 WHERE name = ?1",
            params![name, out],
        )
        .unwrap();
    }

    /// The value of `key` in a CBOR map.
    fn cbor_get<'a>(v: &'a mut ciborium::Value, key: &str) -> &'a mut ciborium::Value {
        let ciborium::Value::Map(m) = v else {
            panic!("a map")
        };
        m.iter_mut()
            .find(|(k, _)| k.as_text() == Some(key))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {key:?} in the envelope"))
    }

    /// Set every `key` in a CBOR tree to `to`; whether one was found.
    fn set_key(v: &mut ciborium::Value, key: &str, to: ciborium::Value) -> bool {
        match v {
            ciborium::Value::Map(m) => {
                let mut found = false;
                for (k, x) in m.iter_mut() {
                    if k.as_text() == Some(key) {
                        *x = to.clone();
                        found = true;
                    } else {
                        found |= set_key(x, key, to.clone());
                    }
                }
                found
            }
            ciborium::Value::Array(a) => a
                .iter_mut()
                .fold(false, |f, x| set_key(x, key, to.clone()) | f),
            _ => false,
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
                "keying was removed",
            ),
            (
                "keying removed, the chain re-hashed with SHA-256 and a reward rewritten (downgrade + re-key)",
                "DELETE FROM meta WHERE key IN ('audit_key', 'audit_keyed_from');
                 UPDATE meta SET value = '3' WHERE key = 'schema';
                 UPDATE decisions SET reward = 1.0, admitted = 1.0 WHERE experiment = 'a' AND id = 2;".into(),
                Box::new(|c: &Connection| {
                    c.execute(
                        "UPDATE audit SET body = json_set(body, '$.reward', 1.0, '$.admitted', 1.0) WHERE experiment = 'a' AND event = 'reward' AND json_extract(body, '$.decision_id') = 2",
                        [],
                    )
                    .unwrap();
                    rechain(c, 1);
                }),
                "keying was removed",
                "the audit key file",
            ),
            (
                "audit_keyed_from moved past the last entry, the chain re-hashed with SHA-256",
                "UPDATE meta SET value = (SELECT MAX(seq) + 1 FROM audit) WHERE key = 'audit_keyed_from'".into(),
                Box::new(|c: &Connection| rechain(c, 1)),
                "the keying start was moved",
                "the keying start was moved",
            ),
            (
                "audit_keyed_from moved to a later entry",
                "UPDATE meta SET value = '5' WHERE key = 'audit_keyed_from'".into(),
                Box::new(|c: &Connection| rechain(c, 1)),
                "HMAC under the key",
                "HMAC under the key",
            ),
            (
                "the stored snapshot's rho edited (checksum recomputed)",
                String::new(),
                Box::new(|c: &Connection| edit_snapshot(c, "a", |env| {
                    let snap = cbor_get(env, "policy");
                    let ciborium::Value::Bytes(bytes) = snap else { panic!("policy bytes") };
                    let policy = dpbandits::snapshot::Snapshot::from_cbor(bytes).unwrap();
                    let mut state = policy.state_value().clone();
                    assert!(set_key(&mut state, "rho", ciborium::Value::Float(60000.0)), "a rho in the state");
                    let mut edited = dpbandits::snapshot::Snapshot::new(policy.setting(), policy.kind(), &state).unwrap();
                    if let Some(l) = &policy.header().label {
                        edited = edited.with_label(l.clone()).unwrap();
                    }
                    *snap = ciborium::Value::Bytes(edited.to_cbor().unwrap());
                })),
                "policy has budget",
                "policy has budget",
            ),
            (
                "config.dropout_reward edited",
                "UPDATE experiments SET config = json_set(config, '$.dropout_reward', 1.0) WHERE name = 'a'".into(),
                none(),
                "config dropout_reward = 1.0",
                "config dropout_reward = 1.0",
            ),
            (
                "config.reward_deadline edited",
                "UPDATE experiments SET config = json_set(config, '$.reward_deadline', 1e9) WHERE name = 'b'".into(),
                none(),
                "config reward_deadline",
                "config reward_deadline",
            ),
            (
                "config.reward_deadline removed",
                "UPDATE experiments SET config = json_remove(config, '$.reward_deadline') WHERE name = 'b'".into(),
                none(),
                "config reward_deadline = null",
                "config reward_deadline = null",
            ),
            (
                "a decision's request_id removed (a retry would get a second decision)",
                "UPDATE decisions SET request_id = NULL WHERE experiment = 'a' AND id = 4".into(),
                none(),
                "decision 4 has request_id None",
                "decision 4 has request_id None",
            ),
            (
                "a decision's request_id replaced",
                "UPDATE decisions SET request_id = 'a-3x' WHERE experiment = 'a' AND id = 4".into(),
                none(),
                "decision 4 has request_id Some(\"a-3x\")",
                "decision 4 has request_id",
            ),
            (
                "a propensity written",
                "UPDATE decisions SET propensity = 0.25 WHERE experiment = 'b' AND id = 9".into(),
                none(),
                "decision 9 has propensity Some(0.25)",
                "decision 9 has propensity",
            ),
            (
                "an issue time moved back (the deadline would abandon it)",
                "UPDATE decisions SET issued_unix = issued_unix - 86400 WHERE experiment = 'b' AND id = 31".into(),
                none(),
                "decision 31 has issued_unix",
                "decision 31 has issued_unix",
            ),
            (
                "while_pending edited in the stored session",
                String::new(),
                Box::new(|c: &Connection| edit_snapshot(c, "c", |env| {
                    *cbor_get(env, "while_pending") = ciborium::Value::Text("wait".into());
                })),
                "while_pending = \"wait\"",
                "while_pending = \"wait\"",
            ),
        ];
        for (what, sql, edit, says, start_says) in cases {
            let (_d, copy) = tampered(&db, &sql, edit);
            // The checkpoint path alone refuses it (the full check then names it).
            let conn = store::Store::open_read_only(&copy).unwrap();
            let fast = checkpoint::resume(&conn, &key).map(|r| r.map(|x| x.0));
            assert!(fast.is_err(), "{what}: the checkpoint path says {fast:?}");
            drop(conn);
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
        // The untouched copy verifies with the pin, and the service starts on it (after the
        // checkpoint).
        let (_d, copy) = tampered(&db, "", |_| {});
        let conn = store::Store::open_read_only(&copy).unwrap();
        let st = startup_check(&conn, Some(&key)).unwrap();
        assert!(
            st.resumed_after.is_some() && st.checkpoint_refused.is_none(),
            "{st:?}"
        );
        drop(conn);
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

    /// A log written by the previous build (create entries without `format`, `params` and
    /// `while_pending`; decision entries without `issued_unix`, `request_id` and `propensity`)
    /// verifies, naming its experiments as not pinned; the first start pins them, and from then
    /// on an edited old decision row is refused.
    #[test]
    fn an_earlier_builds_log_verifies_and_is_pinned_at_the_first_start() {
        let (_dir, db, _, _) = sample();
        let key = key_for(&db, None).unwrap().unwrap();
        let (_d, old) = tampered(
            &db,
            "UPDATE audit SET body = json_remove(body, '$.format', '$.params', '$.while_pending') WHERE event = 'config' AND json_extract(body, '$.action') = 'create';
             UPDATE audit SET body = json_remove(body, '$.issued_unix', '$.request_id', '$.propensity') WHERE event = 'decision';",
            |c: &Connection| {
                // Re-chained with the key: what the previous build wrote.
                let rows: Vec<(i64, String, String, String, String)> = c
                    .prepare("SELECT seq, ts, experiment, event, body FROM audit ORDER BY seq")
                    .unwrap()
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
                    .unwrap()
                    .collect::<rusqlite::Result<_>>()
                    .unwrap();
                let mut prev = GENESIS.to_string();
                for (seq, ts, exp, event, body) in rows {
                    let h = key.entry_hash(&prev, seq, &ts, &exp, &event, &body);
                    c.execute(
                        "UPDATE audit SET prev = ?2, hash = ?3 WHERE seq = ?1",
                        params![seq, prev, h],
                    )
                    .unwrap();
                    prev = h;
                }
            },
        );
        let r = verify_default(&old).unwrap();
        assert_eq!(r.unpinned, ["a", "b", "c"]);
        // Before the first start, an old decision's request id is not provable (documented).
        drop(Service::open(&old, ADMIN).unwrap());
        let r = verify_default(&old).unwrap();
        assert!(r.unpinned.is_empty(), "{r:?}");
        drop(Service::open(&old, ADMIN).unwrap());
        assert_eq!(
            verify_default(&old).unwrap().entries,
            r.entries,
            "pinned once"
        );
        for (what, sql, says) in [
            (
                "an old decision's request id removed",
                "UPDATE decisions SET request_id = NULL WHERE experiment = 'a' AND id = 4",
                "the pin entry",
            ),
            (
                "an old decision's issue time moved",
                "UPDATE decisions SET issued_unix = issued_unix - 1e5 WHERE experiment = 'b' AND id = 2",
                "the pin entry",
            ),
            (
                "an old experiment's while_pending edited",
                "",
                "while_pending = \"wait\"",
            ),
        ] {
            let (_d2, copy) = tampered(&old, sql, |c: &Connection| {
                if sql.is_empty() {
                    edit_snapshot(c, "c", |env| {
                        *cbor_get(env, "while_pending") = ciborium::Value::Text("wait".into());
                    });
                }
            });
            let e = format!("{:#}", verify_default(&copy).unwrap_err());
            assert!(e.contains(says), "{what}: verify says {e}");
            let e = format!("{:#}", Service::open(&copy, ADMIN).map(|_| ()).unwrap_err());
            assert!(
                e.contains("refusing to start") && e.contains(says),
                "{what}: {e}"
            );
        }
    }

    /// A checkpoint is used only when it is the key's and pins the log as it is: one MAC'd
    /// under another key (forged without the key), one whose entry or digest was edited (its
    /// MAC kept), and one correctly MAC'd (by the key's holder) at an index whose hash is not
    /// its head are each refused, the full check runs instead (and passes on an untouched
    /// database, naming the tampered row on a tampered one), and the start writes a good
    /// checkpoint again.
    #[test]
    fn a_forged_or_misplaced_checkpoint_is_refused() {
        let (_dir, db, _, _) = sample();
        let key = key_for(&db, None).unwrap().unwrap();
        let stored = store::Store::open_read_only(&db)
            .unwrap()
            .checkpoint()
            .unwrap()
            .unwrap();
        let (mac, json) = stored.split_once('\n').unwrap();
        let payload: Value = serde_json::from_str(json).unwrap();
        let entries = payload["entries"].as_i64().unwrap();
        let sealed = |k: &AuditKey, p: &Value| {
            let j = p.to_string();
            format!(
                "{}\n{j}",
                store::hex(&k.mac("dpbandits start-up checkpoint", j.as_bytes()))
            )
        };
        let mut moved = payload.clone();
        moved["entries"] = json!(entries - 1);
        let mut digest = payload.clone();
        digest["digest"] = json!("00".repeat(32));
        let other = AuditKey::generate().unwrap();
        for (what, value, says) in [
            (
                "forged under another key",
                sealed(&other, &payload),
                "MAC does not verify",
            ),
            (
                "its entry edited, the MAC kept",
                format!("{mac}\n{moved}"),
                "MAC does not verify",
            ),
            (
                "its digest edited, the MAC kept",
                format!("{mac}\n{digest}"),
                "MAC does not verify",
            ),
            (
                "MAC'd at a wrong index",
                sealed(&key, &moved),
                "the log was rewritten or truncated",
            ),
            (
                "MAC'd with a wrong digest",
                sealed(&key, &digest),
                "keyed digest",
            ),
        ] {
            let (_d, copy) = tampered(&db, "", |c: &Connection| {
                c.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('checkpoint', ?1)",
                    [&value],
                )
                .unwrap();
            });
            let conn = store::Store::open_read_only(&copy).unwrap();
            let e = format!(
                "{:#}",
                checkpoint::resume(&conn, &key).map(|_| ()).unwrap_err()
            );
            assert!(e.contains(says), "{what}: {e}");
            let st = startup_check(&conn, Some(&key)).unwrap();
            assert!(st.resumed_after.is_none(), "{what}: {st:?}");
            assert!(
                st.checkpoint_refused.as_deref().unwrap().contains(says),
                "{what}"
            );
            drop(conn);
            // The service starts (the full check passed) and stores a good checkpoint.
            drop(Service::open(&copy, ADMIN).unwrap());
            let conn = store::Store::open_read_only(&copy).unwrap();
            assert!(checkpoint::resume(&conn, &key).unwrap().is_some(), "{what}");
            // A forged checkpoint cannot hide a tampered row: the full check names it.
            let (_d2, copy) = tampered(
                &db,
                "UPDATE decisions SET reward = 0.125 WHERE experiment = 'a' AND id = 5",
                |c: &Connection| {
                    c.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('checkpoint', ?1)",
                        [&value],
                    )
                    .unwrap();
                },
            );
            let e = format!("{:#}", Service::open(&copy, ADMIN).map(|_| ()).unwrap_err());
            assert!(e.contains("decision 5 has reward 0.125"), "{what}: {e}");
        }
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
