//! `dpbandits serve`, `dpbandits audit-log verify` and `dpbandits backup`: thin wrappers over
//! `dpbandits-serve` (docs/service.md).

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use dpbandits_serve::verify::Expect;

/// `dpbandits serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The database: an SQLite file (created if missing), or a PostgreSQL URL
    /// (`postgres://user@host:port/database`, tables created if missing; then --audit-key-file is
    /// required). Protected data: it holds raw rewards.
    #[arg(long)]
    db: PathBuf,
    /// Address to listen on. Loopback unless told otherwise; port 0 picks a free port (the
    /// `listening` log line names it).
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// A file whose first line is the admin token (else the environment variable
    /// DPBANDITS_ADMIN_TOKEN). Never on the command line.
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
    /// Write the log lines (JSON, one per line) to this file, appended, instead of standard
    /// error; SIGHUP reopens it (log rotation) and reloads --admin-token-file.
    #[arg(long)]
    log_file: Option<PathBuf>,
    /// Allow a non-loopback --listen address (the service has no TLS: put it behind one).
    #[arg(long)]
    allow_remote: bool,
    /// The audit chain's key file (default: `<db>.audit-key`, created 0600 with a fresh key for
    /// a database whose chain is not keyed yet). Keep it away from the database's storage.
    #[arg(long)]
    audit_key_file: Option<PathBuf>,
    /// Seconds a request's header may take to arrive (also the idle keep-alive timeout).
    #[arg(long, default_value_t = 10.0)]
    header_timeout: f64,
    /// Seconds a request's body may take to arrive after its header (else 408).
    #[arg(long, default_value_t = 10.0)]
    body_timeout: f64,
    /// Seconds in-flight requests get after SIGTERM/SIGINT; then every connection is closed and
    /// the process exits.
    #[arg(long, default_value_t = 5.0)]
    shutdown_deadline: f64,
    /// Open connections at most (one more is answered 503); lowered at start to fit the
    /// file-descriptor limit.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// PostgreSQL: milliseconds the writer may wait for the requests of a batch that are on
    /// their way (at most the last commit's time; 0: no wait). Fewer, larger commits (about 0.09
    /// database round trips per decision at 32 clients instead of 0.15) against a little
    /// latency; docs/perf.md.
    #[arg(long, default_value_t = 2.0)]
    batch_wait_ms: f64,
    /// Publish the audit log's head (`{"entries", "head", "ts", "key_fingerprint", "db"}`) to
    /// this file (replaced atomically) at start, at every close and every --publish-every
    /// seconds when it changed. Put it where whoever can write the database cannot (docs/service.md).
    #[arg(long, conflicts_with = "publish_head_cmd")]
    publish_head: Option<PathBuf>,
    /// Publish the head by running this shell command (`sh -c CMD`: the JSON object on its
    /// standard input, DPBANDITS_AUDIT_ENTRIES and DPBANDITS_AUDIT_HEAD in its environment).
    #[arg(long)]
    publish_head_cmd: Option<String>,
    /// Seconds between publications of a changed head (with --publish-head or --publish-head-cmd).
    #[arg(long, default_value_t = 60.0)]
    publish_every: f64,
    /// PostgreSQL: seconds of the writer's lease. Renewed every third of it; a node that stops
    /// renewing (killed, paused, cut off) is taken over by a standby `serve` on the same
    /// database that long after its last renewal, and its later writes are refused (fenced).
    #[arg(long, default_value_t = 10.0)]
    lease_seconds: f64,
    /// PostgreSQL: accept a server whose commits no standby confirms (synchronous_standby_names
    /// empty). Refused by default: a failover of such a server can lose committed ledger charges,
    /// and the budget would be spent again. For a server without failover (logged as a warning).
    #[arg(long)]
    allow_async_replication: bool,
}

/// `dpbandits backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    /// The service database (may be in use by a running `serve`).
    #[arg(long)]
    db: PathBuf,
    /// The copy to write (must not exist).
    #[arg(long)]
    out: PathBuf,
    /// The audit chain's key file, to verify the copy (default: `<db>.audit-key`).
    #[arg(long)]
    audit_key_file: Option<PathBuf>,
}

/// Seconds from a flag: finite, > 0, at most a day.
/// `--batch-wait-ms`: milliseconds in [0, 1000].
fn batch_wait(ms: f64) -> Result<std::time::Duration> {
    if !(ms.is_finite() && (0.0..=1000.0).contains(&ms)) {
        bail!("--batch-wait-ms {ms}: expected milliseconds, a number in [0, 1000]");
    }
    Ok(std::time::Duration::from_secs_f64(ms / 1000.0))
}

fn seconds(flag: &str, x: f64) -> Result<std::time::Duration> {
    if !(x.is_finite() && x > 0.0 && x <= 86_400.0) {
        bail!("--{flag} {x}: expected seconds, a number in (0, 86400]");
    }
    Ok(std::time::Duration::from_secs_f64(x))
}

/// `dpbandits audit-log ...`.
#[derive(Subcommand, Debug)]
pub enum AuditLogCommand {
    /// Verify the audit log of a service database: its chain (keyed: needs the key), a
    /// published head, and every decision, reward, ledger row, counter and token hash of the
    /// tables against it. Exit status 1 when it does not verify, naming what is wrong.
    Verify {
        /// The service database.
        #[arg(long)]
        db: PathBuf,
        /// The audit chain's key file (default: `<db>.audit-key`).
        #[arg(long)]
        audit_key_file: Option<PathBuf>,
        /// A head published earlier (the `head` this command printed): the log must contain it
        /// (at entry --expect-entries when given).
        #[arg(long)]
        expect_head: Option<String>,
        /// The number of entries the log had when --expect-head was published (alone: the
        /// least number of entries the log must have).
        #[arg(long)]
        expect_entries: Option<u64>,
        /// A head published by `serve --publish-head FILE` (its `head` and `entries`): as
        /// --expect-head H --expect-entries N.
        #[arg(long, conflicts_with_all = ["expect_head", "expect_entries"])]
        expect_head_file: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        bail!(
            "--listen {}: not a loopback address; add --allow-remote to listen on it (no TLS: put a TLS proxy in front)",
            args.listen
        );
    }
    if args.max_connections == 0 {
        bail!("--max-connections 0: expected at least 1");
    }
    let limits = dpbandits_serve::Limits {
        header_timeout: seconds("header-timeout", args.header_timeout)?,
        body_timeout: seconds("body-timeout", args.body_timeout)?,
        shutdown_deadline: seconds("shutdown-deadline", args.shutdown_deadline)?,
        max_connections: args.max_connections,
        batch_wait: batch_wait(args.batch_wait_ms)?,
    };
    let every = seconds("publish-every", args.publish_every)?;
    let target = match (args.publish_head, args.publish_head_cmd) {
        (Some(f), _) => Some(dpbandits_serve::publish::Target::File(f)),
        (None, Some(c)) if c.trim().is_empty() => {
            bail!("--publish-head-cmd {c:?}: expected a shell command")
        }
        (None, Some(c)) => Some(dpbandits_serve::publish::Target::Command(c)),
        (None, None) => None,
    };
    let publish = target.map(|target| dpbandits_serve::publish::PublishOptions { target, every });
    let admin_token = dpbandits_serve::read_admin_token(args.admin_token_file.as_deref())?;
    dpbandits_serve::run(dpbandits_serve::ServeOptions {
        db: args.db,
        listen: args.listen,
        admin_token,
        admin_token_file: args.admin_token_file,
        log_file: args.log_file,
        audit_key_file: args.audit_key_file,
        limits,
        publish,
        lease: seconds("lease-seconds", args.lease_seconds)?,
        allow_async_replication: args.allow_async_replication,
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn audit_log(cmd: AuditLogCommand) -> Result<ExitCode> {
    match cmd {
        AuditLogCommand::Verify {
            db,
            audit_key_file,
            mut expect_head,
            mut expect_entries,
            expect_head_file,
            json,
        } => {
            if let Some(f) = &expect_head_file {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("--expect-head-file {}", f.display()))?;
                let h: dpbandits_serve::publish::Head = serde_json::from_str(text.trim())
                    .with_context(|| {
                        format!(
                            "--expect-head-file {}: expected the JSON object serve --publish-head writes",
                            f.display()
                        )
                    })?;
                expect_head = Some(h.head);
                expect_entries = Some(h.entries);
            }
            if let Some(h) = &expect_head
                && (h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                bail!(
                    "--expect-head {h:?}: expected 64 hexadecimal digits (a head printed by verify)"
                );
            }
            let key = dpbandits_serve::verify::key_for(&db, audit_key_file.as_deref())?;
            let expect = Expect {
                head: expect_head.map(|h| h.to_ascii_lowercase()),
                entries: expect_entries,
            };
            match dpbandits_serve::verify::verify(&db, key.as_ref(), &expect) {
                Ok(r) => {
                    if json {
                        println!("{}", serde_json::to_string(&r)?);
                    } else {
                        println!(
                            "audit log verified: {} entries, head {}{}",
                            r.entries,
                            r.head,
                            match (&r.key_fingerprint, r.keyed_from) {
                                (Some(f), Some(from)) =>
                                    format!(" (keyed from entry {from}, key fingerprint {f})"),
                                _ => " (not keyed: SHA-256 only)".into(),
                            }
                        );
                        println!(
                            "tables agree with the log: {} experiments, {} decisions, {} rewards, {} ledger charges, {} open release intents",
                            r.experiments, r.decisions, r.rewards, r.charges, r.open_intents
                        );
                        if !r.tokens_unchecked.is_empty() {
                            println!(
                                "client-token hashes not recorded in the log (created before it recorded them): {}",
                                r.tokens_unchecked.join(", ")
                            );
                        }
                        if !r.unpinned.is_empty() {
                            println!(
                                "parameters and earlier decisions not pinned by the log yet (created by an earlier build; the next serve start pins them): {}",
                                r.unpinned.join(", ")
                            );
                        }
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("audit log does NOT verify: {e:#}");
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}

pub fn backup(args: BackupArgs) -> Result<ExitCode> {
    let key = dpbandits_serve::verify::key_for(&args.db, args.audit_key_file.as_deref())?;
    let r = dpbandits_serve::backup::backup(&args.db, &args.out, key.as_ref())?;
    println!(
        "backup written: {} ({} audit entries, head {}); verified",
        args.out.display(),
        r.entries,
        r.head
    );
    Ok(ExitCode::SUCCESS)
}
