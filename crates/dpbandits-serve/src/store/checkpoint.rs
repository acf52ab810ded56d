//! The keyed checkpoint of the start-up check (`crate::verify::checkpoint`, docs/service.md,
//! "The start-up check: a keyed checkpoint plus the tail"): where it is kept (`meta.checkpoint`)
//! and the keyed digest of the rows the audit log explains.

use super::chain::AuditKey;
use super::chain::{AUDIT_COLUMNS, AuditEntry};
use super::db::{Reads, Tx};
use super::reads::{AuditRow, CheckedCharge, CheckedDecision, TableCounts};
use super::sql::args;
use anyhow::Result;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A multiset digest of rows: the sum modulo 2^256 of each row's keyed hash ([`RowHasher`]).
/// The order of the rows does not matter and a row's term can be taken out again, so a digest
/// recorded at a checkpoint can be carried forward over the rows the log's tail added or
/// settled. Without the key nobody can compute a term, so nobody can make edited rows sum to
/// the recorded digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RowDigest([u64; 4]);

impl RowDigest {
    /// Add a row's term.
    pub fn add(&mut self, term: &[u8; 32]) {
        let mut carry = false;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let t = u64::from_le_bytes(term[8 * i..8 * i + 8].try_into().expect("8 bytes"));
            let (s1, c1) = limb.overflowing_add(t);
            let (s2, c2) = s1.overflowing_add(u64::from(carry));
            *limb = s2;
            carry = c1 || c2;
        }
    }

    /// Take a row's term out (add its negation modulo 2^256).
    pub fn sub(&mut self, term: &[u8; 32]) {
        let mut neg = [0u8; 32];
        let mut carry = true;
        for (n, t) in neg.iter_mut().zip(term) {
            let (v, c) = (!t).overflowing_add(u8::from(carry));
            *n = v;
            carry = c;
        }
        self.add(&neg);
    }

    /// 64 hexadecimal digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|l| format!("{l:016x}")).collect()
    }

    /// From [`RowDigest::to_hex`]'s form.
    pub fn from_hex(s: &str) -> Option<RowDigest> {
        if s.len() != 64 || !s.is_ascii() {
            return None;
        }
        let mut d = [0u64; 4];
        for (i, l) in d.iter_mut().enumerate() {
            *l = u64::from_str_radix(&s[16 * i..16 * i + 16], 16).ok()?;
        }
        Some(RowDigest(d))
    }
}

/// The keyed hash of one row: HMAC-SHA256 under a subkey of the audit key
/// ([`AuditKey::mac`] of the tag `dpbandits row digest`) over the row's fields, each
/// length-prefixed (a missing value has its own marker). A decision row's term covers every
/// column the verifier compares with the log (arm, action set, request id, propensity, issue
/// time) and, once its outcome is recorded, the reward as reported and as admitted and the
/// outcome; a settled ledger row's term covers its experiment, release, arm, measure, cost and
/// status.
#[derive(Clone)]
pub struct RowHasher {
    mac: Hmac<Sha256>,
}

fn put(mac: &mut Hmac<Sha256>, v: Option<&[u8]>) {
    match v {
        Some(b) => {
            mac.update(&u32::try_from(b.len()).unwrap_or(u32::MAX - 1).to_le_bytes());
            mac.update(b);
        }
        None => mac.update(&u32::MAX.to_le_bytes()),
    }
}

fn bits(x: Option<f64>) -> Option<[u8; 8]> {
    x.map(|v| v.to_bits().to_le_bytes())
}

impl RowHasher {
    /// The row hasher of `key`.
    pub fn new(key: &AuditKey) -> RowHasher {
        let sub = key.mac("dpbandits row digest", b"");
        RowHasher {
            mac: <Hmac<Sha256> as Mac>::new_from_slice(&sub).expect("HMAC takes any key length"),
        }
    }

    /// The term of decision `id` of `experiment` as `d` holds it; `settled: false` leaves its
    /// outcome out (the row as it was before its reward was recorded).
    pub fn decision(
        &self,
        experiment: &str,
        id: u64,
        d: &CheckedDecision,
        settled: bool,
    ) -> [u8; 32] {
        let mut m = self.mac.clone();
        put(&mut m, Some(b"d"));
        put(&mut m, Some(experiment.as_bytes()));
        put(&mut m, Some(&id.to_le_bytes()));
        put(&mut m, Some(&d.arm.to_le_bytes()));
        put(&mut m, d.actions.as_deref().map(str::as_bytes));
        put(&mut m, d.request_id.as_deref().map(str::as_bytes));
        put(&mut m, bits(d.propensity).as_ref().map(|b| &b[..]));
        put(&mut m, bits(d.issued_unix).as_ref().map(|b| &b[..]));
        if settled && d.reward.is_some() {
            put(&mut m, Some(b"r"));
            put(&mut m, bits(d.reward).as_ref().map(|b| &b[..]));
            put(&mut m, bits(d.admitted).as_ref().map(|b| &b[..]));
            put(&mut m, d.outcome.as_deref().map(str::as_bytes));
        }
        m.finalize().into_bytes().into()
    }

    /// The term of settled ledger row `id`.
    pub fn charge(&self, id: i64, c: &CheckedCharge) -> [u8; 32] {
        let mut m = self.mac.clone();
        put(&mut m, Some(b"l"));
        put(&mut m, Some(&id.to_le_bytes()));
        put(&mut m, Some(c.experiment.as_bytes()));
        put(&mut m, Some(&c.release.to_le_bytes()));
        put(&mut m, Some(&c.arm.to_le_bytes()));
        put(&mut m, Some(c.measure.as_bytes()));
        put(&mut m, Some(&c.cost.to_bits().to_le_bytes()));
        put(&mut m, Some(c.status.as_bytes()));
        m.finalize().into_bytes().into()
    }
}

fn count(m: &mut std::collections::BTreeMap<String, u64>, exp: &str) {
    match m.get_mut(exp) {
        Some(n) => *n += 1,
        None => {
            m.insert(exp.to_string(), 1);
        }
    }
}

impl Reads {
    /// One pass over the decisions and the ledger: the row counts per experiment the verifier
    /// compares with the log ([`TableCounts`]) and, with a hasher, the digest of every decision
    /// row (with its outcome when recorded) and every settled ledger row (`charged`, `lost`).
    ///
    /// # Errors
    /// Database errors.
    pub fn table_scan(&self, h: Option<&RowHasher>) -> Result<(TableCounts, RowDigest)> {
        let mut counts = TableCounts::default();
        let mut digest = RowDigest::default();
        self.conn.each(
            "SELECT experiment, id, arm, actions, reward, admitted, outcome, request_id, propensity, issued_unix FROM decisions",
            args![],
            |r| {
                let exp: String = r.get(0)?;
                count(&mut counts.decisions, &exp);
                let reward: Option<f64> = r.get(4)?;
                if reward.is_some() {
                    count(&mut counts.rewarded, &exp);
                }
                if let Some(h) = h {
                    let d = CheckedDecision {
                        arm: r.get(2)?,
                        actions: r.get(3)?,
                        reward,
                        admitted: r.get(5)?,
                        outcome: r.get(6)?,
                        request_id: r.get(7)?,
                        propensity: r.get(8)?,
                        issued_unix: r.get(9)?,
                    };
                    let id: i64 = r.get(1)?;
                    digest.add(&h.decision(&exp, id as u64, &d, true));
                }
                Ok(())
            },
        )?;
        self.conn.each(
            "SELECT id, experiment, release, arm, measure, cost, status FROM ledger",
            args![],
            |r| {
                let c = CheckedCharge {
                    experiment: r.get(1)?,
                    release: r.get(2)?,
                    arm: r.get(3)?,
                    measure: r.get(4)?,
                    cost: r.get(5)?,
                    status: r.get(6)?,
                };
                if c.status == "intent" {
                    count(&mut counts.intents, &c.experiment);
                    return Ok(());
                }
                count(&mut counts.charges, &c.experiment);
                if let Some(h) = h {
                    digest.add(&h.charge(r.get(0)?, &c));
                }
                Ok(())
            },
        )?;
        Ok((counts, digest))
    }

    /// The stored checkpoint (`meta.checkpoint`: its MAC, a newline, its JSON), if any.
    ///
    /// # Errors
    /// Database errors.
    pub fn checkpoint(&self) -> Result<Option<String>> {
        self.conn.row(
            "SELECT value FROM meta WHERE key = 'checkpoint'",
            args![],
            |r| r.get(0),
        )
    }

    /// The hash of audit entry `seq`, if the log has it.
    ///
    /// # Errors
    /// Database errors.
    pub fn audit_hash_at(&self, seq: i64) -> Result<Option<String>> {
        self.conn
            .row("SELECT hash FROM audit WHERE seq = ?1", args![seq], |r| {
                r.get(0)
            })
    }

    /// Call `f` with every audit entry after entry `after`, in order (one pass, bounded memory).
    /// SQLite steps through one statement; on PostgreSQL the entries come in pages of
    /// [`AUDIT_PAGE`] by sequence number, so that `f` may read the database between entries
    /// (one connection runs one statement at a time) and a read transaction
    /// ([`Reads::begin_read`]) still sees one state.
    ///
    /// # Errors
    /// Database errors, or `f`'s.
    pub fn for_each_audit_entry_after(
        &self,
        after: i64,
        mut f: impl FnMut(AuditRow) -> Result<()>,
    ) -> Result<()> {
        if !self.conn.is_pg() {
            // `f` may read the same SQLite connection while this statement steps.
            return self.conn.each(
                &format!("SELECT {AUDIT_COLUMNS} FROM audit WHERE seq > ?1 ORDER BY seq"),
                args![after],
                |r| f(AuditEntry::from_row(r)?),
            );
        }
        let mut last = after;
        loop {
            let page = self.conn.rows(
                &format!("SELECT {AUDIT_COLUMNS} FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2"),
                args![last, AUDIT_PAGE],
                AuditEntry::from_row,
            )?;
            let Some(end) = page.last().map(|e| e.seq) else {
                return Ok(());
            };
            for e in page {
                f(e)?;
            }
            last = end;
        }
    }

    /// Open a read transaction (every read until [`Reads::end_read`] sees the same committed
    /// state: an SQLite WAL reader, a PostgreSQL `REPEATABLE READ` snapshot).
    ///
    /// # Errors
    /// Database errors.
    pub fn begin_read(&self) -> Result<()> {
        self.conn.batch(if self.conn.is_pg() {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        } else {
            "BEGIN DEFERRED"
        })
    }

    /// End the read transaction of [`Reads::begin_read`].
    ///
    /// # Errors
    /// Database errors.
    pub fn end_read(&self) -> Result<()> {
        self.conn.batch("COMMIT")
    }
}

/// The audit entries one page of [`Reads::for_each_audit_entry_after`] reads on PostgreSQL.
pub const AUDIT_PAGE: i64 = 10_000;

impl Tx<'_> {
    /// Store `value` as the checkpoint (replacing the previous one) inside `tx`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn set_checkpoint(&self, value: &str) -> Result<()> {
        self.set_meta("checkpoint", value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest is a sum modulo 2^256: a term added and taken out leaves it as it was, the
    /// order does not matter, and the carry crosses limbs.
    #[test]
    fn terms_add_and_come_out_in_any_order() {
        let a = [0xffu8; 32];
        let mut b = [0u8; 32];
        b[0] = 1;
        let mut d = RowDigest::default();
        d.add(&a);
        d.add(&b);
        assert_eq!(d, RowDigest::default(), "2^256 - 1 + 1 wraps to 0");
        let mut e = RowDigest::default();
        e.add(&b);
        e.sub(&a);
        e.sub(&b);
        e.add(&a);
        assert_eq!(e, RowDigest::default());
        let mut f = RowDigest::default();
        f.add(&[7u8; 32]);
        assert_eq!(RowDigest::from_hex(&f.to_hex()), Some(f));
    }
}
