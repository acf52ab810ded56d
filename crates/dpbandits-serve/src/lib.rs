//! `dpbandits serve`: a durable HTTP/JSON decision service for differentially private
//! finite-armed bandit policies (`docs/service.md`).
//!
//! * [`store`]: the SQLite database (WAL, full synchronous commits), the audit log chained with
//!   HMAC-SHA256 under a key kept outside the database ([`store::AuditKey`]) and read-only
//!   inspection.
//! * [`verify`]: `dpbandits audit-log verify` and the start-up self-check: the chain, a published
//!   head, and every decision, reward, ledger row, counter and token hash against the log.
//! * [`service`]: the state machine (experiments, decisions, rewards, the budget ledger); every
//!   state change is committed before the response leaves (group commit: [`api::writer`] runs
//!   the waiting requests in one transaction and commits once).
//! * [`api`]: the axum routes (`/v1/...`), authentication, field-naming errors, structured logs.
//! * [`client`]: a minimal blocking HTTP/1.1 client over `std::net::TcpStream` (tests, the
//!   benchmark example).
//!
//! The database and its audit log are **protected data**: they hold raw rewards, and the stored
//! policy snapshots hold raw reward sums.

pub mod api;
pub mod backup;
pub mod client;
pub mod limits;
pub mod log;
pub mod metrics;
pub mod publish;
pub mod report_html;
mod server;
pub mod service;
pub mod store;
pub mod verify;
pub mod writer;

pub use limits::{FD_RESERVE, Limits, MAX_BODY};

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// Timeouts and the connection limit.
    pub limits: Limits,
    /// Publish the audit log's head out of band (`--publish-head`, `--publish-head-cmd`).
    pub publish: Option<publish::PublishOptions>,
}

/// Read the admin token: from `file` if given (first line, trimmed), else from the environment
/// variable [`ADMIN_TOKEN_ENV`]. At least 16 characters.
///
/// # Errors
/// Neither given, an unreadable file, or a token shorter than 16 characters.
pub fn read_admin_token(file: Option<&std::path::Path>) -> Result<String> {
    if let Some(p) = file
        && let Ok(m) = std::fs::metadata(p)
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = m.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            log::log(
                "warning",
                serde_json::json!({"message": format!(
                    "--admin-token-file {}: mode {mode:o} lets other users read the admin token; chmod 600 it",
                    p.display()
                )}),
            );
        }
    }
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
    if token.chars().count() < 16 {
        bail!(
            "admin token: {} characters; expected at least 16",
            token.chars().count()
        );
    }
    Ok(token)
}

/// Run the service until SIGTERM or SIGINT (graceful: in-flight requests finish within the
/// shutdown deadline; then every connection is closed).
///
/// # Errors
/// The database cannot be opened or the address cannot be bound.
pub fn run(opts: ServeOptions) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let r = rt.block_on(serve_until(opts, shutdown(), |_| ()));
    // Connection tasks still open after the deadline are dropped with the runtime; a blocking
    // database operation in flight gets a moment to finish.
    rt.shutdown_timeout(Duration::from_secs(1));
    r
}

/// The lock file of database `db`: `DB.lock` beside it (the whole file name plus `.lock`, so
/// `trial.v1` and `trial.v2` have their own).
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.file_name().map(OsString::from).unwrap_or_default();
    name.push(".lock");
    db.with_file_name(name)
}

/// The soft limit on open file descriptors (`RLIMIT_NOFILE`), if known.
fn fd_limit() -> Option<usize> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY)
        .then(|| usize::try_from(r.rlim_cur).unwrap_or(usize::MAX))
}

/// How far the writer thread lowers its nice value below the process's (a higher scheduling
/// priority). The writer is the one serial stage of the service: every request waits for its
/// batch, so a writer kept off the CPU by the HTTP threads delays them all (docs/perf.md,
/// "The writer made cheap": about 6% more decisions per second with 32 clients on 2 cores).
pub const WRITER_PRIORITY: i32 = 10;

/// Lower the calling thread's nice value by `boost` (at least -20); returns the new value.
/// Needs the privilege to raise a priority (root, `CAP_SYS_NICE` or `RLIMIT_NICE`).
fn raise_priority(boost: i32) -> std::io::Result<i32> {
    // SAFETY: gettid, getpriority and setpriority take and return plain integers and touch
    // only this thread's scheduling priority; errno is this thread's own (cleared, then read).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        // getpriority can return -1 as a valid value: errno tells.
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let target = (now - boost).max(-20);
        if libc::setpriority(libc::PRIO_PROCESS, tid, target) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(target)
    }
}

/// Take the database's lock file ([`lock_path`], 0600): one service per database (the
/// in-memory policies must be the only writers).
fn lock_db(db: &Path) -> Result<std::fs::File> {
    // One service per database: the in-memory policies must be the only writers. The lock is
    // released by the OS when the process ends, however it ends.
    let lock_path = lock_path(db);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .with_context(|| {
            format!(
                "--db {}: cannot create {}",
                db.display(),
                lock_path.display()
            )
        })?;
    if lock.try_lock().is_err() {
        bail!(
            "--db {}: another dpbandits serve holds {} (one service per database)",
            db.display(),
            lock_path.display()
        );
    }
    Ok(lock)
}

/// `limits` with `max_connections` lowered to fit the file-descriptor limit (less
/// [`FD_RESERVE`]), logged when lowered.
fn fit_connections(limits: Limits) -> Limits {
    let mut limits = limits;
    if let Some(fds) = fd_limit() {
        let budget = fds.saturating_sub(FD_RESERVE).max(1);
        if limits.max_connections > budget {
            log::log(
                "connection-limit-lowered",
                serde_json::json!({"max_connections": budget, "asked": limits.max_connections,
                                   "fd_limit": fds, "fd_reserve": FD_RESERVE}),
            );
            limits.max_connections = budget;
        }
    }
    limits
}

/// Serve until `stop` completes (graceful within the shutdown deadline), calling `bound` with
/// the listening address once the socket is bound. [`run`] is this with SIGTERM/SIGINT as
/// `stop`; embedders (the benchmark) pass their own future.
///
/// # Errors
/// The database cannot be opened or the address cannot be bound.
pub async fn serve_until(
    opts: ServeOptions,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    let lock = lock_db(&opts.db)?;
    let limits = fit_connections(opts.limits);
    let mut service =
        service::Service::open_keyed(&opts.db, &opts.admin_token, opts.audit_key_file.as_deref())?;
    if let Some(p) = &opts.publish {
        service.set_publisher(publish::Publisher::new(p.clone(), &opts.db));
    }
    let experiments = service.experiment_count();
    let tokens = service.tokens();
    let (jobs, queue) = tokio::sync::mpsc::channel(4 * api::MAX_BATCH);
    std::thread::Builder::new()
        .name("dpbandits-writer".into())
        .spawn(move || {
            let priority = match raise_priority(WRITER_PRIORITY) {
                Ok(nice) => serde_json::json!({"nice": nice, "raised": true}),
                Err(e) => serde_json::json!({"raised": false, "error": e.to_string(),
                    "hint": "the writer runs at the process's priority; allow it to raise its own (CAP_SYS_NICE, or systemd LimitNICE=) for the throughput of docs/perf.md"}),
            };
            log::log("writer-priority", priority);
            api::writer(service, queue)
        })
        .context("starting the writer thread")?;
    if let Some(p) = &opts.publish {
        // The publication period's timer: a no-op job, so an idle writer publishes too.
        let (jobs, every) = (jobs.clone(), p.every);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                if jobs.send(api::publish_tick()).await.is_err() {
                    break;
                }
            }
        });
    }
    let state = api::Shared {
        jobs,
        tokens,
        body_timeout: limits.body_timeout,
    };
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("--listen {}", opts.listen))?;
    let addr = listener.local_addr()?;
    log::log(
        "listening",
        serde_json::json!({"addr": addr.to_string(), "db": opts.db.display().to_string(), "experiments": experiments,
                           "max_connections": limits.max_connections}),
    );
    bound(addr);
    let clean = server::serve(listener, api::router(state), limits, stop).await;
    log::log(
        "stopped",
        serde_json::json!({"connections_closed_at_deadline": clean.closed_at_deadline}),
    );
    drop(lock);
    Ok(())
}

async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => log::log("signal", serde_json::json!({"signal": "SIGTERM"})),
        _ = int.recv() => log::log("signal", serde_json::json!({"signal": "SIGINT"})),
    }
}

#[cfg(test)]
mod tests {
    /// The writer's priority is raised on its own thread only: the nice value reported is the
    /// thread's (read back from the kernel), the process's other threads keep theirs; without
    /// the privilege the refusal is the kernel's (EPERM or EACCES), never a silent success.
    #[test]
    fn the_writer_raises_only_its_own_priority() {
        // SAFETY: getpriority on the calling process (this thread's group leader) only reads.
        let main_nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let before = main_nice();
        let r = std::thread::spawn(|| {
            let got = super::raise_priority(super::WRITER_PRIORITY);
            // SAFETY: as above, for this thread's id.
            let now = unsafe {
                libc::getpriority(
                    libc::PRIO_PROCESS,
                    libc::syscall(libc::SYS_gettid) as libc::id_t,
                )
            };
            (got.map_err(|e| e.raw_os_error()), now)
        })
        .join()
        .unwrap();
        match r {
            (Ok(n), now) => {
                assert_eq!(n, now, "the nice value reported is the thread's");
                assert!(n < before || n == -20, "{n} is not above {before}");
            }
            (Err(code), _) => assert!(
                code == Some(libc::EPERM) || code == Some(libc::EACCES),
                "{code:?}"
            ),
        }
        assert_eq!(main_nice(), before, "other threads keep their priority");
    }
}
