//! The start-up check's keyed checkpoint: a restart verifies the checkpoint and the log's tail
//! after it, not the whole log (docs/service.md, "The start-up check: a keyed checkpoint plus
//! the tail").
//!
//! A checkpoint (`meta.checkpoint`) records, as of audit entry `entries`: that entry's hash
//! (the head), the keying (fingerprint, first keyed entry), what the log said per experiment up
//! to there (the verifier's per-experiment state: counts, create and pin entries, token, late
//! outcomes) and the keyed digest of every decision row and settled ledger row
//! ([`store::RowDigest`]), all under an HMAC with the audit key. It is written only after a
//! verification of exactly that state passed (the full one, or this one), so what it records
//! was checked against the whole log.
//!
//! At start-up ([`startup_check`]): the checkpoint's MAC, its keying against `meta`, and that
//! the log still has entry `entries` with that hash; then the tail (entries after it) as the
//! full check walks the log (each link's HMAC, each entry against its row), then the tables
//! against the log's counts as the full check does (counts per experiment, counters, tokens,
//! configuration, restored sessions, late outcomes, pins), and finally the row digest: the
//! checkpoint's, carried forward over the rows the tail added or settled, must equal the
//! digest of the tables now, so a row the checkpoint covered that was changed, added or
//! deleted since is refused. Any failure falls back to the full check, which names what is
//! wrong (or passes, and a new checkpoint replaces the bad one).

use super::{Expect, Report, Resume, Seen, Walked, walk};
use crate::store::{self, AuditKey, RowDigest, RowHasher};
use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, HashSet};

/// The MAC's domain tag.
const DOMAIN: &str = "dpbandits start-up checkpoint";

/// The checkpoint's format.
const FORMAT: u64 = 1;

/// What a checkpoint records (its JSON, under the MAC).
#[derive(serde::Serialize, serde::Deserialize)]
struct Payload {
    format: u64,
    entries: i64,
    head: String,
    key_fingerprint: String,
    keyed_from: i64,
    digest: String,
    at: String,
    seen: BTreeMap<String, Seen>,
}

/// What the start-up check did.
#[derive(Debug)]
pub struct Startup {
    /// What the verification proves (entries, head, counts).
    pub report: Report,
    /// The checkpoint's entry when the check resumed after a checkpoint (`None`: the whole log).
    pub resumed_after: Option<u64>,
    /// Why a stored checkpoint was not used (the full check ran instead).
    pub checkpoint_refused: Option<String>,
    /// The checkpoint of the state just verified, to store (`None` for an unkeyed log).
    pub next: Option<String>,
}

/// The start-up check: after the stored checkpoint when it holds (its MAC, its head, the tail,
/// the tables, the row digest), else the whole log; returns the checkpoint of the state it
/// verified. `key`: the chain's key (`None`: an unkeyed log, always checked whole, no
/// checkpoint).
///
/// # Errors
/// The database does not verify (the full check's message).
pub fn startup_check(conn: &store::Reads, key: Option<&AuditKey>) -> Result<Startup> {
    let Some(key) = key else {
        let report = super::verify_conn(conn, None, &Expect::default())?;
        return Ok(Startup {
            report,
            resumed_after: None,
            checkpoint_refused: None,
            next: None,
        });
    };
    let mut refused = None;
    match resume(conn, key) {
        Ok(Some((after, w))) => {
            let next = Some(seal(key, &w, &w.digest)?);
            return Ok(Startup {
                report: w.report,
                resumed_after: Some(after),
                checkpoint_refused: None,
                next,
            });
        }
        Ok(None) => {}
        Err(e) => refused = Some(format!("{e:#}")),
    }
    let w = walk(
        conn,
        Some(key),
        &Expect::default(),
        None,
        Some(&RowHasher::new(key)),
    )?;
    let next = Some(seal(key, &w, &w.digest)?);
    Ok(Startup {
        report: w.report,
        resumed_after: None,
        checkpoint_refused: refused,
        next,
    })
}

/// The checkpoint of the state `w` verified, with the tables' digest `digest`: `MAC \n JSON`.
fn seal(key: &AuditKey, w: &Walked, digest: &RowDigest) -> Result<String> {
    let r = &w.report;
    let (Some(fingerprint), Some(keyed_from)) = (&r.key_fingerprint, r.keyed_from) else {
        bail!("a checkpoint needs a keyed log");
    };
    #[derive(serde::Serialize)]
    struct Ref<'a> {
        format: u64,
        entries: i64,
        head: &'a str,
        key_fingerprint: &'a str,
        keyed_from: i64,
        digest: String,
        at: String,
        seen: &'a BTreeMap<String, Seen>,
    }
    let json = serde_json::to_string(&Ref {
        format: FORMAT,
        entries: r.entries as i64,
        head: &r.head,
        key_fingerprint: fingerprint,
        keyed_from,
        digest: digest.to_hex(),
        at: store::now(),
        seen: &w.seen,
    })?;
    Ok(format!(
        "{}\n{json}",
        store::hex(&key.mac(DOMAIN, json.as_bytes()))
    ))
}

/// The stored checkpoint's payload, its MAC checked under `key`.
fn open(stored: &str, key: &AuditKey) -> Result<Payload> {
    let (mac, json) = stored
        .split_once('\n')
        .context("meta.checkpoint is not a MAC and a JSON object")?;
    let want = store::hex(&key.mac(DOMAIN, json.as_bytes()));
    if !store::same_hex(mac, &want) {
        bail!(
            "meta.checkpoint: its MAC does not verify under the audit key (the checkpoint was forged or edited without the key)"
        );
    }
    let p: Payload = serde_json::from_str(json).context("meta.checkpoint: its JSON")?;
    if p.format != FORMAT {
        bail!(
            "meta.checkpoint: format {}, this build reads {FORMAT}",
            p.format
        );
    }
    Ok(p)
}

/// The check after the stored checkpoint: `None` when there is none; else the checkpoint's
/// entry and the walk of the tail (with the tables' digest).
///
/// # Errors
/// The checkpoint does not hold (MAC, keying, head), or the tail, the tables or the row digest
/// do not verify.
pub(super) fn resume(conn: &store::Reads, key: &AuditKey) -> Result<Option<(u64, Walked)>> {
    let Some(stored) = conn.checkpoint()? else {
        return Ok(None);
    };
    let p = open(&stored, key)?;
    let keying = conn.audit_keying()?;
    if keying.as_ref() != Some(&(p.key_fingerprint.clone(), p.keyed_from)) {
        bail!(
            "meta.checkpoint: recorded with keying ({}, from entry {}); meta says {keying:?}",
            p.key_fingerprint,
            p.keyed_from
        );
    }
    let at = match p.entries {
        0 => Some(store::GENESIS.to_string()), // an empty log's head
        n => conn.audit_hash_at(n)?,
    };
    match at {
        Some(h) if h == p.head => {}
        other => bail!(
            "meta.checkpoint: entry {} has hash {}; the log has {other:?} (the log was rewritten or truncated)",
            p.entries,
            p.head
        ),
    }
    let mut expected = RowDigest::from_hex(&p.digest).context("meta.checkpoint: its digest")?;
    let after = p.entries;
    let hasher = RowHasher::new(key);
    let resume = Resume {
        after,
        head: p.head,
        seen: p.seen,
    };
    let w = walk(
        conn,
        Some(key),
        &Expect::default(),
        Some(resume),
        Some(&hasher),
    )?;
    carry_forward(conn, &hasher, &w, &mut expected)?;
    if w.digest != expected {
        bail!(
            "the tables' keyed digest is {}; the checkpoint at entry {after} carried over the tail's rows says {} (a decision or ledger row that the checkpoint covered was changed, added or deleted)",
            w.digest.to_hex(),
            expected.to_hex()
        );
    }
    Ok(Some((after as u64, w)))
}

/// Carry the checkpoint's digest over the rows the tail describes: each decision it added (as
/// the row stands), each earlier decision it settled (its unsettled term out, its settled term
/// in), each ledger row it settled. Each of those rows was checked against its entry in the walk.
fn carry_forward(
    conn: &store::Reads,
    h: &RowHasher,
    w: &Walked,
    digest: &mut RowDigest,
) -> Result<()> {
    let mut rows = store::RowReader::new(conn)?;
    let mut row = |exp: &str, id: u64| {
        rows.decision(exp, id)?
            .with_context(|| format!("decisions: experiment {exp:?} decision {id} is missing"))
    };
    let new: HashSet<&(String, u64)> = w.touched.decided.iter().collect();
    for (exp, id) in &w.touched.decided {
        // Added in the tail: as it stands (settled or not).
        digest.add(&h.decision(exp, *id, &row(exp, *id)?, true));
    }
    for key @ (exp, id) in &w.touched.settled {
        if !new.contains(key) {
            // Decided before the checkpoint, settled in the tail: unsettled there.
            let d = row(exp, *id)?;
            digest.sub(&h.decision(exp, *id, &d, false));
            digest.add(&h.decision(exp, *id, &d, true));
        }
    }
    let mut rows = store::RowReader::new(conn)?;
    for id in &w.touched.charged {
        let c = rows
            .ledger(*id)?
            .with_context(|| format!("ledger: row {id} is missing"))?;
        digest.add(&h.charge(*id, &c));
    }
    Ok(())
}
