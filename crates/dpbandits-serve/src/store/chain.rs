//! The hash-chained audit log: the key ([`AuditKey`]) and how the chain is keyed, appending an
//! entry, the head, and reading entries back (the export, a closed experiment's report).

use super::db::*;
use super::sql::{Row, args};
use anyhow::{Context, Result, bail};
use sha2::Sha256;
use std::path::Path;

/// The events of the audit log: the one list the service writes ([`Tx::audit`]) and the verifier
/// reads back ([`Event::parse`]); the name is what the `event` column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A configuration change: its body's `action` says which ([`Action`]).
    Config,
    /// A commitment opened.
    Commitment,
    /// A decision issued.
    Decision,
    /// A reward applied.
    Reward,
    /// A decision abandoned (its dropout reward applied).
    Abandon,
    /// A release drawn.
    Release,
    /// A ledger row settled (charged or lost).
    BudgetCharge,
    /// A best-arm identification run stopped.
    Stop,
    /// An experiment closed (the body is the report).
    Close,
    /// A true outcome reported after its decision was abandoned: stored, not applied.
    LateOutcome,
}

impl Event {
    /// Every event.
    pub const ALL: [Event; 10] = [
        Event::Config,
        Event::Commitment,
        Event::Decision,
        Event::Reward,
        Event::Abandon,
        Event::Release,
        Event::BudgetCharge,
        Event::Stop,
        Event::Close,
        Event::LateOutcome,
    ];

    /// The name written in the `event` column.
    pub fn name(self) -> &'static str {
        match self {
            Event::Config => "config",
            Event::Commitment => "commitment",
            Event::Decision => "decision",
            Event::Reward => "reward",
            Event::Abandon => "abandon",
            Event::Release => "release",
            Event::BudgetCharge => "budget-charge",
            Event::Stop => "stop",
            Event::Close => "close",
            Event::LateOutcome => "late-outcome",
        }
    }

    /// The event named `name` (`None`: not an event this build writes).
    pub fn parse(name: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// The `action` of a [`Event::Config`] entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// An experiment created.
    Create,
    /// An experiment of an earlier build pinned (`crate::verify::LOG_FORMAT`).
    Pin,
    /// A client token replaced.
    RotateToken,
    /// A schema-1 experiment migrated to a session snapshot.
    Migrate,
    /// Keying starts here (database-wide).
    AuditKey,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 5] = [
        Action::Create,
        Action::Pin,
        Action::RotateToken,
        Action::Migrate,
        Action::AuditKey,
    ];

    /// The name written in the body's `action`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Pin => "pin",
            Action::RotateToken => "rotate-token",
            Action::Migrate => "migrate",
            Action::AuditKey => "audit-key",
        }
    }

    /// The action of a config entry's body (`None`: none, or not one this build writes).
    pub fn of(body: &serde_json::Value) -> Option<Action> {
        let name = body.get("action")?.as_str()?;
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditEntry {
    /// Sequence number.
    pub seq: i64,
    /// Timestamp.
    pub ts: String,
    /// Experiment.
    pub experiment: String,
    /// Event.
    pub event: String,
    /// Body (compact JSON text).
    pub body: String,
    /// Previous hash.
    pub prev: String,
    /// This entry's hash.
    pub hash: String,
}

/// The audit table's columns in [`AuditEntry`]'s order ([`AuditEntry::from_row`]).
pub(super) const AUDIT_COLUMNS: &str = "seq, ts, experiment, event, body, prev, hash";

impl AuditEntry {
    /// An entry from a row that selected [`AUDIT_COLUMNS`].
    pub(super) fn from_row(r: &Row<'_>) -> Result<AuditEntry> {
        Ok(AuditEntry {
            seq: r.get(0)?,
            ts: r.get(1)?,
            experiment: r.get(2)?,
            event: r.get(3)?,
            body: r.get(4)?,
            prev: r.get(5)?,
            hash: r.get(6)?,
        })
    }
}

/// The key of the audit chain: 32 random bytes kept **outside** the database (a file, by default
/// `<db>.audit-key`, mode 0600). Entries are chained with HMAC-SHA256 under it, so someone who can
/// write the database file but cannot read the key can neither re-chain edited entries nor append
/// forged ones without `dpbandits audit-log verify` (given the key) noticing.
#[derive(Clone)]
pub struct AuditKey {
    key: [u8; 32],
}

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuditKey({})", self.fingerprint())
    }
}

impl AuditKey {
    /// A fresh key from the operating system's entropy source.
    ///
    /// # Errors
    /// The entropy source fails.
    pub fn generate() -> Result<AuditKey> {
        use rand::TryRng;
        let mut key = [0u8; 32];
        rand::rngs::SysRng
            .try_fill_bytes(&mut key)
            .map_err(|e| anyhow::anyhow!("the operating system's entropy source failed: {e}"))?;
        Ok(AuditKey { key })
    }

    /// A key from its 64 hexadecimal digits.
    ///
    /// # Errors
    /// Not exactly 64 hexadecimal digits.
    pub fn from_hex(hex: &str) -> Result<AuditKey> {
        let hex = hex.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "expected 64 hexadecimal digits (32 bytes), got {} characters",
                hex.len()
            );
        }
        let mut key = [0u8; 32];
        for (i, k) in key.iter_mut().enumerate() {
            *k = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)?;
        }
        Ok(AuditKey { key })
    }

    /// The key's 64 hexadecimal digits (what the key file holds).
    pub fn to_hex(&self) -> String {
        hex(&self.key)
    }

    /// Read the key file `path` (its first line: 64 hexadecimal digits).
    ///
    /// # Errors
    /// The file cannot be read or does not hold a key.
    pub fn load(path: &Path) -> Result<AuditKey> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--audit-key-file {}", path.display()))?;
        AuditKey::from_hex(text.lines().next().unwrap_or(""))
            .with_context(|| format!("--audit-key-file {}", path.display()))
    }

    /// Read the key file `path`, or create it (mode 0600, written to a temporary name and
    /// renamed) with a fresh key when it does not exist; `true` when created.
    ///
    /// # Errors
    /// The file exists but does not hold a key, or cannot be created.
    pub fn load_or_create(path: &Path) -> Result<(AuditKey, bool)> {
        if path.exists() {
            return Ok((AuditKey::load(path)?, false));
        }
        let key = AuditKey::generate()?;
        let tmp = path.with_extension("audit-key.tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(format!("{}\n", key.to_hex()).as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write()
            .with_context(|| format!("--audit-key-file {}: cannot create it", path.display()))?;
        Ok((key, true))
    }

    /// The key's public fingerprint (stored in `meta.audit_key`, printed by `verify`): the first
    /// 16 hexadecimal digits of SHA-256 over a domain tag and the key. It identifies the key
    /// without revealing it.
    pub fn fingerprint(&self) -> String {
        let mut m = b"dpbandits audit key\n".to_vec();
        m.extend_from_slice(&self.key);
        sha256_hex(&m)[..16].to_string()
    }

    /// The keyed hash of one audit entry: HMAC-SHA256 under the key over the message of
    /// [`entry_hash`].
    pub fn entry_hash(
        &self,
        prev: &str,
        seq: i64,
        ts: &str,
        experiment: &str,
        event: &str,
        body: &str,
    ) -> String {
        use hmac::{Hmac, Mac};
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(entry_message(prev, seq, ts, experiment, event, body).as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// HMAC-SHA256 under the key over a domain tag (a line) and `data`: the keyed checkpoint's
    /// MAC and the row digest's subkey (`store::RowHasher`). Never equal to an entry's hash for
    /// the same bytes: an entry's message starts with 64 hexadecimal digits, a tag does not.
    pub fn mac(&self, domain: &str, data: &[u8]) -> [u8; 32] {
        use hmac::{Hmac, Mac};
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(domain.as_bytes());
        mac.update(b"\n");
        mac.update(data);
        mac.finalize().into_bytes().into()
    }
}

/// The default key file of database `db`: `<db>.audit-key` beside it.
pub fn default_key_path(db: &Path) -> std::path::PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".audit-key");
    p.into()
}

/// The message an audit entry's hash covers: the previous hash and the entry's fields, each
/// followed by a newline (fields never contain one unescaped: the body is compact JSON).
pub(super) fn entry_message(
    prev: &str,
    seq: i64,
    ts: &str,
    experiment: &str,
    event: &str,
    body: &str,
) -> String {
    format!("{prev}\n{seq}\n{ts}\n{experiment}\n{event}\n{body}\n")
}

/// The unkeyed hash of one audit entry (entries before `audit_keyed_from`, i.e. written by
/// schema 3 and older): SHA-256 over the entry's message (`entry_message`). Keyed entries use
/// [`AuditKey::entry_hash`].
pub fn entry_hash(
    prev: &str,
    seq: i64,
    ts: &str,
    experiment: &str,
    event: &str,
    body: &str,
) -> String {
    sha256_hex(entry_message(prev, seq, ts, experiment, event, body).as_bytes())
}

impl Reads {
    /// Audit entries after `after` (of `experiment`, or all), at most `limit`.
    ///
    /// # Errors
    /// Database errors.
    pub fn audit_entries(
        &self,
        experiment: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<AuditEntry>> {
        match experiment {
            Some(e) => self.conn.rows(
                &format!(
                    "SELECT {AUDIT_COLUMNS} FROM audit WHERE seq > ?1 AND experiment = ?2 ORDER BY seq LIMIT ?3"
                ),
                args![after, e, limit],
                AuditEntry::from_row,
            ),
            None => self.conn.rows(
                &format!("SELECT {AUDIT_COLUMNS} FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2"),
                args![after, limit],
                AuditEntry::from_row,
            ),
        }
    }

    /// How the audit chain of a database is keyed (`meta`): the key's fingerprint and the first
    /// keyed entry (`1` for a database created keyed; after the last unkeyed entry for one keyed on
    /// open). `None`: not keyed (schema 3 and older, never opened by a keyed build).
    pub fn audit_keying(&self) -> Result<Option<(String, i64)>> {
        let get = |k: &str| -> Result<Option<String>> {
            self.conn
                .row("SELECT value FROM meta WHERE key = ?1", args![k], |r| {
                    r.get(0)
                })
        };
        match (get("audit_key")?, get("audit_keyed_from")?) {
            (Some(f), Some(from)) => Ok(Some((
                f,
                from.parse()
                    .with_context(|| format!("meta audit_keyed_from = {from:?}: not an integer"))?,
            ))),
            (None, None) => Ok(None),
            (f, from) => {
                bail!(
                    "meta: audit_key = {f:?} and audit_keyed_from = {from:?}: one without the other"
                )
            }
        }
    }

    /// The number of audit entries and the head (the last entry's hash; [`GENESIS`] for an empty
    /// log): what `--publish-head` publishes and `--expect-head` checks.
    ///
    /// # Errors
    /// Database errors.
    pub fn audit_head(&self) -> Result<(u64, String)> {
        let last: Option<(i64, String)> = self.conn.row(
            "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
            args![],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(last.map_or((0, GENESIS.to_string()), |(s, h)| (s as u64, h)))
    }

    /// The report of a closed experiment: the body of its audit log's `close` entry with that
    /// entry's `audit_seq` and `audit_hash` (`None`: not closed).
    ///
    /// # Errors
    /// A database error, or a `close` entry whose body is not JSON.
    pub fn close_entry(&self, experiment: &str) -> Result<Option<serde_json::Value>> {
        let row: Option<(i64, String, String)> = self.conn.row(
            // `event = 'close'` literally: the partial index `audit_close` answers it.
            "SELECT seq, body, hash FROM audit WHERE experiment = ?1 AND event = 'close' ORDER BY seq LIMIT 1",
            args![experiment],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let Some((seq, body, hash)) = row else {
            return Ok(None);
        };
        let mut v: serde_json::Value = serde_json::from_str(&body)
            .with_context(|| format!("experiment {experiment:?}: audit entry {seq} (close)"))?;
        v["audit_seq"] = serde_json::json!(seq);
        v["audit_hash"] = serde_json::json!(hash);
        Ok(Some(v))
    }
}

impl Tx<'_> {
    /// Append one entry to the audit chain inside `tx`; returns its `(seq, hash)`.
    ///
    /// # Errors
    /// Database errors, or the audit key is not loaded ([`Store::init_audit_key`]).
    pub fn audit(
        &self,
        experiment: &str,
        event: Event,
        body: &serde_json::Value,
    ) -> Result<(i64, String)> {
        let event = event.name();
        let cached = self.reads.head.borrow_mut().take();
        let (seq, prev) = match cached {
            Some((s, h)) => (s + 1, h),
            None => match self.audit_head()? {
                (0, _) => (1, GENESIS.to_string()),
                (s, h) => (s as i64 + 1, h),
            },
        };
        let ts = now();
        let body = body.to_string();
        // Keyed: the store holds the key ([`Store::init_audit_key`]); a store without it cannot
        // append.
        let hash = self
            .reads
            .key
            .borrow()
            .as_ref()
            .map(|k| k.entry_hash(&prev, seq, &ts, experiment, event, &body))
            .context(
                "appending to the audit log: the audit key is not loaded on this connection",
            )?;
        self.reads.conn.execute_deferred(
            "INSERT INTO audit (seq, ts, experiment, event, body, prev, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            args![seq, ts, experiment, event, body, prev, hash],
        )?;
        self.reads.head.replace(Some((seq, hash.clone())));
        Ok((seq, hash))
    }
}

impl Store {
    /// Key the audit chain of the open database with `key`: keep it for [`Tx::audit`], and on the
    /// first keyed open record the key's fingerprint and the first keyed sequence number in `meta`
    /// (schema 3 becomes 4); a database that already holds unkeyed entries gets a keyed `config`
    /// entry `audit-key` naming where keying starts.
    ///
    /// # Errors
    /// The database is keyed with another key (its fingerprint differs), or database errors.
    pub fn init_audit_key(&self, key: &AuditKey) -> Result<()> {
        let keying = self.audit_keying()?;
        if let Some((f, _)) = &keying
            && *f != key.fingerprint()
        {
            bail!(
                "--db {}: its audit chain is keyed with the key of fingerprint {f}; the audit key given has fingerprint {} (use the database's key file)",
                self.reads.name,
                key.fingerprint()
            );
        }
        *self.reads.key.borrow_mut() = Some(key.clone());
        match keying {
            Some(_) => Ok(()),
            None => {
                let tx = self.begin()?;
                let last: i64 = tx
                    .conn
                    .value("SELECT COALESCE(MAX(seq), 0) FROM audit", args![])?;
                tx.conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('audit_key', ?1), ('audit_keyed_from', ?2)",
                    args![key.fingerprint(), (last + 1).to_string()],
                )?;
                if last > 0 {
                    tx.audit(
                        "",
                        Event::Config,
                        &serde_json::json!({"action": Action::AuditKey.name(), "fingerprint": key.fingerprint(),
                            "keyed_from": last + 1, "unkeyed_entries": last}),
                    )?;
                }
                if tx.schema_version()? == SCHEMA_VERSION_UNKEYED {
                    tx.set_schema_version(SCHEMA_VERSION)?;
                }
                tx.commit()?;
                Ok(())
            }
        }
    }
}
