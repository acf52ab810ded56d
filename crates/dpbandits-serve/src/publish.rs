//! Publishing the audit log's head out of band (`serve --publish-head FILE`,
//! `--publish-head-cmd CMD`): the number of entries and the last entry's hash, written where
//! whoever can write the database cannot rewrite it (another host, a transparency log, the
//! trial's register). `dpbandits audit-log verify --expect-head H --expect-entries N` then
//! checks that the log still holds that head, which no key protects against: a whole-file
//! rollback, or a rewrite by someone who holds the key.
//!
//! Published at the start, after every commit that closes an experiment, and every
//! `--publish-every` seconds when the head changed; a failure is logged (event
//! `publish-head-failed`) and the service goes on.

use anyhow::{Context, Result};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the head goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A file, replaced atomically (temporary file beside it, synced, renamed) by one JSON
    /// object: `{"entries", "head", "ts", "key_fingerprint", "db"}`.
    File(PathBuf),
    /// A shell command (`sh -c CMD`), given the same JSON object on its standard input and the
    /// environment variables `DPBANDITS_AUDIT_ENTRIES` and `DPBANDITS_AUDIT_HEAD`. Not waited
    /// for; a non-zero exit is logged.
    Command(String),
}

/// How and when the head is published.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishOptions {
    /// Where.
    pub target: Target,
    /// At most this long between a change of the head and its publication (besides every close).
    pub every: Duration,
}

/// The state of publication, owned by the writer with the service.
#[derive(Debug)]
pub struct Publisher {
    options: PublishOptions,
    db: PathBuf,
    last: Option<(u64, String)>,
    last_at: Instant,
    due: bool,
}

/// One publication: what the file holds and the command reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    /// Entries in the log.
    pub entries: u64,
    /// The hash of entry `entries`.
    pub head: String,
    /// When published (RFC 3339, UTC).
    pub ts: String,
    /// The audit key's fingerprint, when the chain is keyed.
    pub key_fingerprint: Option<String>,
    /// The database's path.
    pub db: String,
}

impl Publisher {
    /// A publisher for the database `db`; the first [`Publisher::publish_if_due`] publishes.
    pub fn new(options: PublishOptions, db: &Path) -> Publisher {
        Publisher {
            options,
            db: db.to_path_buf(),
            last: None,
            last_at: Instant::now(),
            due: true,
        }
    }

    /// Publish at the next [`Publisher::publish_if_due`] (a close was committed).
    pub fn request(&mut self) {
        self.due = true;
    }

    /// Whether a publication is due: requested, or the period has passed.
    pub fn is_due(&self) -> bool {
        self.due || self.last_at.elapsed() >= self.options.every
    }

    /// Publish `(entries, head)` if a publication is due and it differs from the last one.
    ///
    /// # Errors
    /// The file cannot be written or the command cannot be started (it stays due).
    pub fn publish_if_due(
        &mut self,
        entries: u64,
        head: &str,
        fingerprint: Option<&str>,
    ) -> Result<bool> {
        if !self.is_due() {
            return Ok(false);
        }
        self.last_at = Instant::now();
        if self
            .last
            .as_ref()
            .is_some_and(|(n, h)| *n == entries && h == head)
        {
            self.due = false;
            return Ok(false);
        }
        let record = Head {
            entries,
            head: head.to_string(),
            ts: crate::store::now(),
            key_fingerprint: fingerprint.map(str::to_string),
            db: self.db.display().to_string(),
        };
        let line = format!("{}\n", serde_json::to_string(&record)?);
        match &self.options.target {
            Target::File(p) => write_atomic(p, line.as_bytes())?,
            Target::Command(cmd) => run_command(cmd, &record, line)?,
        }
        self.last = Some((entries, head.to_string()));
        self.due = false;
        Ok(true)
    }
}

/// Write `bytes` to `path` through a temporary file beside it (mode 0600, synced), renamed.
///
/// # Errors
/// The temporary file cannot be written or renamed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(".tmp-{}", std::process::id()));
    let tmp = path.with_file_name(name);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write()
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
        .with_context(|| format!("--publish-head {}", path.display()))
}

/// Start `sh -c cmd` with the head on its standard input and in its environment; a thread
/// waits for it and logs a failure.
fn run_command(cmd: &str, record: &Head, line: String) -> Result<()> {
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("DPBANDITS_AUDIT_ENTRIES", record.entries.to_string())
        .env("DPBANDITS_AUDIT_HEAD", &record.head)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("--publish-head-cmd {cmd:?}: cannot start sh"))?;
    let stdin = child.stdin.take();
    let cmd = cmd.to_string();
    let entries = record.entries;
    std::thread::Builder::new()
        .name("dpbandits-publish".into())
        .spawn(move || {
            if let Some(mut s) = stdin {
                let _ = s.write_all(line.as_bytes());
            }
            match child.wait() {
                Ok(st) if st.success() => {}
                other => crate::log::log(
                    "publish-head-failed",
                    serde_json::json!({"command": cmd, "entries": entries,
                                       "status": format!("{other:?}")}),
                ),
            }
        })
        .context("starting the publish thread")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_published_once_per_change_and_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("head.json");
        let mut p = Publisher::new(
            PublishOptions {
                target: Target::File(file.clone()),
                every: Duration::from_secs(3600),
            },
            Path::new("trial.sqlite"),
        );
        assert!(p.publish_if_due(3, "abc", Some("f")).unwrap());
        let h: Head = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!((h.entries, h.head.as_str()), (3, "abc"));
        // Not due (the period has not passed, nothing requested).
        assert!(!p.publish_if_due(4, "def", Some("f")).unwrap());
        p.request();
        assert!(p.publish_if_due(4, "def", Some("f")).unwrap());
        // Requested, but the same head: not written again.
        p.request();
        assert!(!p.publish_if_due(4, "def", Some("f")).unwrap());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A directory that does not exist: an error naming the flag, nothing left behind.
        let mut bad = Publisher::new(
            PublishOptions {
                target: Target::File(dir.path().join("missing/head.json")),
                every: Duration::from_secs(1),
            },
            Path::new("trial.sqlite"),
        );
        let e = bad.publish_if_due(1, "x", None).unwrap_err();
        assert!(format!("{e:#}").contains("--publish-head"), "{e:#}");
        assert!(bad.is_due(), "a failed publication stays due");
    }

    /// The service publishes the committed head at start and at a close; `verify` accepts it
    /// as the pin.
    #[test]
    fn the_service_publishes_its_head_at_start_and_at_every_close() {
        use crate::service::{CreateRequest, Service};
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("trial.sqlite");
        let file = dir.path().join("head.json");
        let mut s = Service::open(&db, "publish-admin-token-0123456789").unwrap();
        s.set_publisher(Publisher::new(
            PublishOptions {
                target: Target::File(file.clone()),
                every: Duration::from_secs(3600),
            },
            &db,
        ));
        assert!(s.publish_if_due().unwrap(), "published at start");
        let req: CreateRequest = serde_json::from_value(serde_json::json!({"name": "t",
            "arms": 2, "policy": {"kind": "adac_ucb", "rho": 0.5}}))
        .unwrap();
        s.create(req).unwrap();
        let id = s.decide("t", None, None).unwrap()["decision_id"]
            .as_u64()
            .unwrap();
        s.reward("t", id, 1.0).unwrap();
        assert!(!s.publish_if_due().unwrap(), "no close, period not passed");
        let report = s.close("t", None).unwrap();
        assert!(s.publish_if_due().unwrap(), "published at the close");
        let h: Head = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(Some(h.head.as_str()), report["audit_hash"].as_str());
        drop(s);
        let pin = crate::verify::Expect {
            head: Some(h.head.clone()),
            entries: Some(h.entries),
        };
        let key = crate::verify::key_for(&db, None).unwrap();
        let r = crate::verify::verify(&db, key.as_ref(), &pin).unwrap();
        assert_eq!((r.entries, r.head), (h.entries, h.head));
    }

    #[test]
    fn a_command_gets_the_head_on_stdin_and_in_its_environment() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cmd = format!(
            "cat > {0}.json; echo \"$DPBANDITS_AUDIT_ENTRIES $DPBANDITS_AUDIT_HEAD\" > {0}.env",
            out.display()
        );
        let mut p = Publisher::new(
            PublishOptions {
                target: Target::Command(cmd),
                every: Duration::from_secs(3600),
            },
            Path::new("trial.sqlite"),
        );
        assert!(p.publish_if_due(7, "feed", None).unwrap());
        let env = out.with_extension("env");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(env.exists() && std::fs::read_to_string(&env).unwrap().ends_with('\n')) {
            assert!(Instant::now() < deadline, "the command did not run");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(std::fs::read_to_string(&env).unwrap(), "7 feed\n");
        let h: Head =
            serde_json::from_str(&std::fs::read_to_string(out.with_extension("json")).unwrap())
                .unwrap();
        assert_eq!(h.entries, 7);
    }
}
