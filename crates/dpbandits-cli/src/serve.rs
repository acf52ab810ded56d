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
    let admin_token = dpbandits_serve::read_admin_token(args.admin_token_file.as_deref())?;
    dpbandits_serve::run(dpbandits_serve::ServeOptions {
        db: args.db,
        listen: args.listen,
        admin_token,
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
