//! `dpbandits serve`: a durable HTTP/JSON decision service for differentially private
//! finite-armed bandit policies (`docs/service.md`).
//!
//! * [`store`]: the SQLite database (WAL, full synchronous commits), the audit log chained with
//!   HMAC-SHA256 under a key kept outside the database ([`store::AuditKey`]) and read-only
//!   inspection.
//! * [`verify`]: `dpbandits audit-log verify` and the start-up self-check: the chain, a published
//!   head, and every decision, reward, ledger row, counter and token hash against the log.
//! * [`service`]: the state machine (experiments, decisions, rewards, the budget ledger); every
//!   state change is one transaction committed before the response leaves.
//! * [`api`]: the axum routes (`/v1/...`), authentication, field-naming errors, structured logs.
//! * [`client`]: a minimal blocking HTTP/1.1 client over `std::net::TcpStream` (tests, the
//!   benchmark example).
//!
//! The database and its audit log are **protected data**: they hold raw rewards, and the stored
//! policy snapshots hold raw reward sums.

pub mod api;
pub mod client;
pub mod report_html;
pub mod service;
pub mod store;
pub mod verify;

use anyhow::{Context, Result, bail};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The environment variable that may hold the admin token.
pub const ADMIN_TOKEN_ENV: &str = "DPBANDITS_ADMIN_TOKEN";

/// Options of `dpbandits serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The database file (created if missing).
    pub db: PathBuf,
    /// Address to listen on (loopback by default).
    pub listen: SocketAddr,
    /// The admin token (read from a file or the environment, never from the command line).
    pub admin_token: String,
    /// The audit chain's key file (default `<db>.audit-key`, created 0600 for a database whose
    /// chain is not keyed yet). Keep it (or a copy) away from the database's storage: someone who
    /// can write the database but not read the key cannot rewrite the log undetected.
    pub audit_key_file: Option<PathBuf>,
}

/// Read the admin token: from `file` if given (first line, trimmed), else from the environment
/// variable [`ADMIN_TOKEN_ENV`]. At least 16 characters.
///
/// # Errors
/// Neither given, an unreadable file, or a token shorter than 16 characters.
pub fn read_admin_token(file: Option<&std::path::Path>) -> Result<String> {
    let token = match file {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("--admin-token-file {}", p.display()))?
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        None => match std::env::var(ADMIN_TOKEN_ENV) {
            Ok(t) => t.trim().to_string(),
            Err(_) => bail!(
                "admin token: give --admin-token-file PATH or set {ADMIN_TOKEN_ENV} (never on the command line)"
            ),
        },
    };
    if token.len() < 16 {
        bail!(
            "admin token: {} characters; expected at least 16",
            token.len()
        );
    }
    Ok(token)
}

/// Run the service until SIGTERM or SIGINT (graceful: in-flight requests finish).
///
/// # Errors
/// The database cannot be opened or the address cannot be bound.
pub fn run(opts: ServeOptions) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve_until(opts, shutdown(), |_| ()))
}

/// Serve until `stop` completes (graceful), calling `bound` with the listening address once the
/// socket is bound. [`run`] is this with SIGTERM/SIGINT as `stop`; embedders (the benchmark)
/// pass their own future.
///
/// # Errors
/// The database cannot be opened or the address cannot be bound.
pub async fn serve_until(
    opts: ServeOptions,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    // One service per database: the in-memory policies must be the only writers. The lock is
    // released by the OS when the process ends, however it ends.
    let lock_path = opts.db.with_extension("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| {
            format!(
                "--db {}: cannot create {}",
                opts.db.display(),
                lock_path.display()
            )
        })?;
    if lock.try_lock().is_err() {
        bail!(
            "--db {}: another dpbandits serve holds {} (one service per database)",
            opts.db.display(),
            lock_path.display()
        );
    }
    let service =
        service::Service::open_keyed(&opts.db, &opts.admin_token, opts.audit_key_file.as_deref())?;
    let experiments = service.experiment_count();
    let state = Arc::new(Mutex::new(service));
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("--listen {}", opts.listen))?;
    let addr = listener.local_addr()?;
    api::log(
        "listening",
        serde_json::json!({"addr": addr.to_string(), "db": opts.db.display().to_string(), "experiments": experiments}),
    );
    bound(addr);
    axum::serve(listener, api::router(state))
        .with_graceful_shutdown(stop)
        .await?;
    api::log("stopped", serde_json::json!({}));
    drop(lock);
    Ok(())
}

async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => api::log("signal", serde_json::json!({"signal": "SIGTERM"})),
        _ = int.recv() => api::log("signal", serde_json::json!({"signal": "SIGINT"})),
    }
}
