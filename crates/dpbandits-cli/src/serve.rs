//! `dpbandits serve` and `dpbandits audit-log verify`: thin wrappers over `dpbandits-serve`
//! (docs/service.md).

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// `dpbandits serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The SQLite database (created if missing). Protected data: it holds raw rewards.
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
    /// Allow a non-loopback --listen address (the service has no TLS: put it behind one).
    #[arg(long)]
    allow_remote: bool,
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
}

/// Seconds from a flag: finite, > 0, at most a day.
fn seconds(flag: &str, x: f64) -> Result<std::time::Duration> {
    if !(x.is_finite() && x > 0.0 && x <= 86_400.0) {
        bail!("--{flag} {x}: expected seconds, a number in (0, 86400]");
    }
    Ok(std::time::Duration::from_secs_f64(x))
}

/// `dpbandits audit-log ...`.
#[derive(Subcommand, Debug)]
pub enum AuditLogCommand {
    /// Verify the hash chain of the audit log of a service database.
    Verify {
        /// The service database.
        #[arg(long)]
        db: PathBuf,
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
    };
    let admin_token = dpbandits_serve::read_admin_token(args.admin_token_file.as_deref())?;
    dpbandits_serve::run(dpbandits_serve::ServeOptions {
        db: args.db,
        listen: args.listen,
        admin_token,
        limits,
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn audit_log(cmd: AuditLogCommand) -> Result<ExitCode> {
    match cmd {
        AuditLogCommand::Verify { db } => match dpbandits_serve::store::verify_chain(&db) {
            Ok(r) => {
                println!("audit log verified: {} entries, head {}", r.entries, r.head);
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("audit log does NOT verify: {e:#}");
                Ok(ExitCode::from(1))
            }
        },
    }
}
