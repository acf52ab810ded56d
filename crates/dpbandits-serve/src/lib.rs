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
pub mod checkpointer;
pub mod client;
mod forward;
pub mod limits;
pub mod log;
pub mod metrics;
pub mod monitor_html;
pub mod publish;
pub mod readers;
pub mod report_html;
mod server;
pub mod service;
pub mod store;
#[doc(hidden)]
pub mod testdb;
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
    /// The database: an SQLite file (created if missing), or a PostgreSQL URL
    /// (`postgres://user@host:port/database`; its tables are created if missing).
    pub db: PathBuf,
    /// Address to listen on (loopback by default).
    pub listen: SocketAddr,
    /// The admin token (read from a file or the environment, never from the command line).
    pub admin_token: String,
    /// The file the admin token was read from: SIGHUP reads it again (a new token replaces the
    /// old one at once). `None`: the token came from the environment and SIGHUP keeps it.
    pub admin_token_file: Option<PathBuf>,
    /// Write the log lines to this file (appended, created 0600) instead of standard error;
    /// SIGHUP reopens it (for log rotation).
    pub log_file: Option<PathBuf>,
    /// The audit chain's key file (default `<db>.audit-key`, created 0600 for a database whose
    /// chain is not keyed yet). Keep it (or a copy) away from the database's storage: someone who
    /// can write the database but not read the key cannot rewrite the log undetected.
    pub audit_key_file: Option<PathBuf>,
    /// Timeouts and the connection limit.
    pub limits: Limits,
    /// Publish the audit log's head out of band (`--publish-head`, `--publish-head-cmd`).
    pub publish: Option<publish::PublishOptions>,
    /// PostgreSQL: the writer's lease (`--lease-seconds`; [`store::DEFAULT_LEASE`]). A node that
    /// stops renewing (killed, paused, cut off) is taken over that long after its last renewal.
    pub lease: Duration,
    /// PostgreSQL: take a server whose commits no standby confirms (`--allow-async-replication`;
    /// refused by default: [`service::Claim::allow_async_replication`]).
    pub allow_async_replication: bool,
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
/// shutdown deadline; then every connection is closed). SIGHUP reloads the admin token and
/// reopens the log file.
///
/// # Errors
/// The database cannot be opened or does not verify, or the address cannot be bound.
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

/// The soft limit on open file descriptors (`RLIMIT_NOFILE`), raised first to the hard limit
/// (at most 65,536) when it is lower; `None` if unknown or unlimited.
fn fd_limit() -> Option<usize> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut r) } == 0;
    if !ok {
        return None;
    }
    let want = r.rlim_max.min(65_536);
    if r.rlim_cur < want {
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: r.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) } == 0 {
            r.rlim_cur = want;
        }
    }
    (r.rlim_cur != libc::RLIM_INFINITY).then(|| usize::try_from(r.rlim_cur).unwrap_or(usize::MAX))
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

/// Take the two locks of one service per database: `DB.lock` by path (its message names the
/// other service), and an exclusive `flock` on the database file itself, which every hard link
/// and every path to the file shares (a lock by path alone is dodged by a hard link). The
/// database file is created (0600) when missing.
///
/// A PostgreSQL database takes no file lock: it has one writer by its `owner` row (claimed at
/// open, `store::Store::claim`).
fn lock_database(db: &Path) -> Result<(Option<std::fs::File>, Option<std::fs::File>)> {
    if store::is_postgres_url(db) {
        return Ok((None, None));
    }
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
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(db)
        .with_context(|| format!("--db {}: cannot open", db.display()))?;
    if file.try_lock().is_err() {
        bail!(
            "--db {}: another dpbandits serve has this database open under another path (a hard link or another name of the same file); one service per database",
            db.display()
        );
    }
    Ok((Some(lock), Some(file)))
}

/// Log a warning for each file of the database (and its key) that users other than its owner
/// may read: the database holds raw rewards, the key protects the audit log.
fn warn_readable(db: &Path, key_file: Option<&Path>) {
    use std::os::unix::fs::PermissionsExt;
    let mut files = Vec::new();
    if !store::is_postgres_url(db) {
        files.push(db.to_path_buf());
        for suffix in ["-wal", "-shm"] {
            let mut name = db.as_os_str().to_os_string();
            name.push(suffix);
            files.push(PathBuf::from(name));
        }
    }
    files.extend(
        key_file
            .map(Path::to_path_buf)
            .or_else(|| (!store::is_postgres_url(db)).then(|| store::default_key_path(db))),
    );
    for f in files {
        if let Ok(m) = std::fs::metadata(&f) {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                api::log(
                    "warning",
                    serde_json::json!({"file": f.display().to_string(), "mode": format!("{mode:o}"),
                        "message": format!("{}: mode {mode:o} lets other users read it (raw rewards, or the audit key); chmod 600 it", f.display())}),
                );
            }
        }
    }
}

/// The answer to every request while the start-up check runs: 503 (JSON, `Retry-After: 1`)
/// with the check's progress; `/v1/health` says `"status": "verifying"`.
fn verifying(started: std::time::Instant) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (checked, total) = verify::progress::get();
    let body = serde_json::json!({
        "status": "verifying",
        "error": format!("starting: the database is being verified against its audit log ({checked} of {total} entries); retry shortly"),
        "progress": {"entries_checked": checked, "entries_total": total,
                     "elapsed_s": started.elapsed().as_secs_f64()},
    });
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "1")],
        axum::Json(body),
    )
        .into_response()
}

/// A router that answers [`verifying`] until `ready` holds the service's router, then hands
/// every request to it.
fn gate(
    ready: std::sync::Arc<std::sync::OnceLock<axum::Router>>,
    forward_to: std::sync::Arc<std::sync::Mutex<Option<String>>>,
) -> axum::Router {
    let started = std::time::Instant::now();
    axum::Router::new().fallback(move |req: axum::extract::Request| {
        let ready = ready.clone();
        let to = forward_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        async move {
            match (ready.get(), to) {
                (Some(r), _) => {
                    let mut r = r.clone();
                    match tower_service::Service::call(&mut r, req).await {
                        Ok(resp) => resp,
                        Err(never) => match never {},
                    }
                }
                (None, Some(to)) => forward::forward(&to, req).await,
                (None, None) => verifying(started),
            }
        }
    })
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

/// A service on a thread of its own ([`serve_in_thread`]): its address, and what stops it.
pub struct Background {
    /// The address it listens on (ready: verified, its writer running).
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Background {
    /// Stop it (gracefully, within its shutdown deadline) and wait for its thread: how it ended.
    ///
    /// # Errors
    /// The service's own error, or its thread panicked.
    pub fn stop(mut self) -> Result<()> {
        self.shut()
    }

    fn shut(&mut self) -> Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow::anyhow!("the service thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.shut();
    }
}

/// [`serve_until`] on a thread of its own, a multi-thread runtime of `workers` workers, for
/// embedders in synchronous code (the benchmarks, the HTTP tests): returns once the service is
/// ready, or with its error; [`Background::stop`] (or dropping it) stops it.
///
/// # Errors
/// The runtime cannot be built, or the service ends (or is not ready) within `ready_within`.
pub fn serve_in_thread(
    opts: ServeOptions,
    workers: usize,
    ready_within: std::time::Duration,
) -> Result<Background> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()?;
        rt.block_on(serve_until(
            opts,
            async move {
                let _ = stopped.await;
            },
            move |a| {
                let _ = tx.send(a);
            },
        ))
    });
    let mut b = Background {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        stop: Some(stop),
        thread: Some(thread),
    };
    match rx.recv_timeout(ready_within) {
        Ok(addr) => {
            b.addr = addr;
            Ok(b)
        }
        Err(_) => {
            let r = b.shut();
            Err(r.err().unwrap_or_else(|| {
                anyhow::anyhow!("the service was not ready within {ready_within:?}")
            }))
        }
    }
}

/// Serve until `stop` completes (graceful within the shutdown deadline), calling `bound` with
/// the listening address once the service is ready (verified, its writer running). [`run`] is
/// this with SIGTERM/SIGINT as `stop`; embedders (the benchmark) pass their own future.
///
/// The port is open from the start: while the start-up check runs, every request is answered
/// 503 with its progress (`/v1/health`: `"status": "verifying"`); the `accepting` log line says
/// so, the `listening` line says the service is ready.
///
/// # Errors
/// The database cannot be opened or does not verify, or the address cannot be bound.
pub async fn serve_until(
    opts: ServeOptions,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    if let Some(f) = &opts.log_file {
        log::set_file(f).with_context(|| format!("--log-file {}", f.display()))?;
    }
    // One service per database: the in-memory policies must be the only writers. The locks are
    // released by the OS when the process ends, however it ends.
    let (path_lock, db_lock) = lock_database(&opts.db)?;
    // Installed before the start-up check: from now on SIGHUP never ends the process.
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("installing the SIGHUP handler")?;
    let limits = fit_connections(opts.limits);
    let (listener, addr) = bind(&opts).await?;
    let ready = std::sync::Arc::new(std::sync::OnceLock::new());
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        tokio::select! {
            () = stop => {}
            _ = failed_rx => {}
        }
    };
    // PostgreSQL: while this node waits as a standby, requests go to the writer's node.
    let forward_to = std::sync::Arc::new(std::sync::Mutex::new(None));
    let mut server = tokio::spawn(server::serve(
        listener,
        gate(ready.clone(), forward_to.clone()),
        limits,
        stop,
    ));
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opening = open_service(&opts, addr, forward_to, cancel.clone());
    let Some((service, failed_tx)) = open_or_stop(opening, &mut server, &cancel, failed_tx).await?
    else {
        return Ok(());
    };
    let experiments = service.experiment_count();
    let tokens = service.tokens();
    let (jobs, writer) = start_writer(service, db_lock, limits.batch_wait)?;
    if let Ok(Some(key)) = verify::key_for(&opts.db, opts.audit_key_file.as_deref()) {
        checkpointer::start(opts.db.clone(), key, &jobs);
    }
    let timers = start_timers(&jobs, opts.publish.as_ref());
    let state = api::Shared {
        jobs,
        writer,
        tokens: tokens.clone(),
        body_timeout: limits.body_timeout,
        health: std::sync::Arc::default(),
        readers: readers::Readers::new(&opts.db),
        boundaries: std::sync::Arc::default(),
    };
    let hup = tokio::spawn(reload_on_sighup(hup, tokens, opts.admin_token_file.clone()));
    let _ = ready.set(api::router(state));
    api::log(
        "listening",
        serde_json::json!({"addr": addr.to_string(), "db": store::shown(&opts.db), "experiments": experiments,
                           "max_connections": limits.max_connections}),
    );
    bound(addr);
    let clean = server.await.context("the server task panicked")?;
    // Kept until here: a dropped sender would end the server (its `failed_rx` resolves).
    drop(failed_tx);
    hup.abort();
    timers.into_iter().for_each(|t| t.abort());
    api::log(
        "stopped",
        serde_json::json!({"connections_closed_at_deadline": clean.closed_at_deadline}),
    );
    drop(path_lock);
    Ok(())
}

/// The service opening, or `None` when the server stopped first: a stop signal while the
/// service verified its database, waited for it, or waited as a standby. The opening thread is
/// then told to give up (`cancel`, [`service::Claim::cancel`]) and the stop is logged.
/// A start that is refused is logged (`start-refused`), stops the server (`failed`) and is
/// the error; an opened service comes back with `failed`, which the caller keeps until the
/// server ends (a dropped sender would end it).
async fn open_or_stop(
    opening: impl std::future::Future<Output = Result<service::Service>>,
    server: &mut tokio::task::JoinHandle<server::Stopped>,
    cancel: &std::sync::atomic::AtomicBool,
    failed: tokio::sync::oneshot::Sender<()>,
) -> Result<Option<(service::Service, tokio::sync::oneshot::Sender<()>)>> {
    let opened = tokio::select! {
        r = opening => r,
        _ = &mut *server => {
            cancel.store(true, std::sync::atomic::Ordering::Relaxed);
            api::log("stopped", serde_json::json!({"before_ready": true}));
            return Ok(None);
        }
    };
    match opened {
        Ok(s) => Ok(Some((s, failed))),
        Err(e) => {
            api::log(
                "start-refused",
                serde_json::json!({"error": format!("{e:#}")}),
            );
            let _ = failed.send(());
            let _ = server.await;
            Err(e)
        }
    }
}

/// Bind `--listen` (log line `accepting`: the port answers from now on, 503 "verifying" until
/// the service is ready).
async fn bind(opts: &ServeOptions) -> Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("--listen {}", opts.listen))?;
    let addr = listener.local_addr()?;
    api::log(
        "accepting",
        serde_json::json!({"addr": addr.to_string(), "db": store::shown(&opts.db),
                           "state": "verifying"}),
    );
    Ok((listener, addr))
}

/// Open the service (its start-up check) off the runtime's threads, then warn about readable
/// files and set the head's publisher.
async fn open_service(
    opts: &ServeOptions,
    addr: SocketAddr,
    forward_to: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    cancel: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<service::Service> {
    let (db, token, key) = (
        opts.db.clone(),
        opts.admin_token.clone(),
        opts.audit_key_file.clone(),
    );
    let claim = service::Claim {
        lease: opts.lease,
        // `serve` on a PostgreSQL database another node holds is a standby until that node's
        // lease ends.
        wait: Some(Duration::MAX),
        addr: Some(addr.to_string()),
        forward_to: Some(forward_to),
        cancel: Some(cancel.clone()),
        allow_async_replication: opts.allow_async_replication,
        ..service::Claim::default()
    };
    // A thread of its own, not the runtime's blocking pool: the PostgreSQL client runs its own
    // runtime, which may not start inside another's thread.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("dpbandits-open".into())
        .spawn(move || {
            // A PostgreSQL server that is down or restarting is waited for (a node started
            // during a database restart must not give up).
            let opened = loop {
                match service::Service::open_claiming(&db, &token, key.as_deref(), &claim) {
                    Err(e)
                        if store::is_unreachable(&e)
                            && !cancel.load(std::sync::atomic::Ordering::Relaxed) =>
                    {
                        log::log(
                            "database-unreachable",
                            serde_json::json!({"error": format!("{e:#}")}),
                        );
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    r => break r,
                }
            };
            let _ = tx.send(opened);
        })
        .context("starting the start-up check's thread")?;
    let mut service = rx.await.context("the start-up check panicked")??;
    warn_readable(&opts.db, opts.audit_key_file.as_deref());
    if let Some(p) = &opts.publish {
        service.set_publisher(publish::Publisher::new(p.clone(), &opts.db));
    }
    Ok(service)
}

/// Start the writer thread (the service's only owner, at a raised priority) holding the
/// database file's lock, which it drops only after the service's connection has closed (closing
/// another descriptor of the file earlier would drop SQLite's locks); returns its queue and
/// its thread (which a request unparks after queueing: [`api::Shared`]'s `writer`).
fn start_writer(
    service: service::Service,
    db_lock: Option<std::fs::File>,
    batch_wait: std::time::Duration,
) -> Result<(tokio::sync::mpsc::Sender<api::Queued>, std::thread::Thread)> {
    let (jobs, queue) = tokio::sync::mpsc::channel(4 * api::MAX_BATCH);
    let thread = std::thread::Builder::new()
        .name("dpbandits-writer".into())
        .spawn(move || {
            let priority = match raise_priority(WRITER_PRIORITY) {
                Ok(nice) => serde_json::json!({"nice": nice, "raised": true}),
                Err(e) => serde_json::json!({"raised": false, "error": e.to_string(),
                    "hint": "the writer runs at the process's priority; allow it to raise its own (CAP_SYS_NICE, or systemd LimitNICE=) for the throughput of docs/perf.md"}),
            };
            api::log("writer-priority", priority);
            api::writer(service, queue, batch_wait);
            drop(db_lock);
        })
        .context("starting the writer thread")?;
    Ok((jobs, thread.thread().clone()))
}

/// The writer's timers: the reward deadlines ([`enforce_deadlines`]) and, with
/// `--publish-head`, the publication period (a no-op job, so an idle writer publishes too).
fn start_timers(
    jobs: &tokio::sync::mpsc::Sender<api::Queued>,
    publish: Option<&publish::PublishOptions>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut timers = vec![tokio::spawn(enforce_deadlines(jobs.clone()))];
    if let Some(p) = publish {
        let (jobs, every) = (jobs.clone(), p.every);
        timers.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                if jobs.send(api::publish_tick().into()).await.is_err() {
                    break;
                }
            }
        }));
    }
    timers
}

/// How often the deadline timer runs (`enforce_deadlines`: every decision past its `reward_deadline` is
/// abandoned).
pub const DEADLINE_TICK: Duration = Duration::from_millis(250);

/// The reward-deadline timer: every [`DEADLINE_TICK`] the writer abandons every decision past
/// its experiment's `reward_deadline` ([`service::Service::expire_all`]), so decisions expire
/// on time with no decision request (after enrolment ends, `close` need not wait). Each run
/// that abandons something is logged.
async fn enforce_deadlines(jobs: tokio::sync::mpsc::Sender<api::Queued>) {
    let mut tick = tokio::time::interval(DEADLINE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let job: api::Job = Box::new(|s: &mut service::Service| {
            let r = s.expire_all();
            api::Step::Reply(Box::new(move |committed: bool| match r {
                Ok(0) => {}
                Ok(n) => api::log(
                    "deadline-timer",
                    serde_json::json!({"abandoned": n, "committed": committed}),
                ),
                Err(e) => api::log(
                    "deadline-timer",
                    serde_json::json!({"error": e.to_string()}),
                ),
            }))
        });
        if jobs.send(job.into()).await.is_err() {
            return;
        }
    }
}

/// On each SIGHUP (`hup`, installed before the start-up check; signals that came during it are
/// handled now): reopen the log file ([`log::reopen`]) and read the admin token again
/// from `token_file` (a new token replaces the old one at once; an unreadable or short one is
/// logged and the old one kept). Each is logged.
async fn reload_on_sighup(
    mut hup: tokio::signal::unix::Signal,
    tokens: std::sync::Arc<std::sync::RwLock<service::Tokens>>,
    token_file: Option<PathBuf>,
) {
    while hup.recv().await.is_some() {
        let log = match log::reopen() {
            Ok(Some(p)) => serde_json::json!({"reopened": p.display().to_string()}),
            Ok(None) => serde_json::json!("standard error"),
            Err(e) => serde_json::json!({"error": e}),
        };
        let token = match &token_file {
            None => {
                serde_json::json!({"reloaded": false, "why": format!("the admin token came from {ADMIN_TOKEN_ENV}")})
            }
            Some(f) => match read_admin_token(Some(f)) {
                Ok(t) => {
                    tokens
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .set_admin(&t);
                    serde_json::json!({"reloaded": true, "file": f.display().to_string()})
                }
                Err(e) => {
                    serde_json::json!({"reloaded": false, "error": format!("{e:#}"), "kept": "the previous admin token"})
                }
            },
        };
        api::log(
            "sighup",
            serde_json::json!({"log": log, "admin_token": token}),
        );
    }
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

#[cfg(test)]
mod tests {
    /// While the start-up check runs, every request is answered 503 JSON with the check's
    /// progress (`/v1/health`: `"status": "verifying"`, `Retry-After: 1`); once the service's
    /// router is set, the same gate hands every request to it.
    #[test]
    fn the_gate_answers_verifying_then_the_service() {
        use axum::body::Body;
        use axum::http::Request;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ready = std::sync::Arc::new(std::sync::OnceLock::new());
        let mut g = super::gate(ready.clone(), std::sync::Arc::default());
        let call = |g: &mut axum::Router, path: &str| {
            let req = Request::builder().uri(path).body(Body::empty()).unwrap();
            rt.block_on(async {
                let r = tower_service::Service::call(g, req).await.unwrap();
                let status = r.status().as_u16();
                let retry = r
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_string());
                let b = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
                (
                    status,
                    retry,
                    serde_json::from_slice::<serde_json::Value>(&b).unwrap(),
                )
            })
        };
        for path in ["/v1/health", "/v1/experiments/x/decisions"] {
            let (status, retry, v) = call(&mut g, path);
            assert_eq!((status, retry.as_deref()), (503, Some("1")), "{v}");
            assert_eq!(v["status"], "verifying", "{v}");
            assert!(v["progress"]["entries_total"].is_i64(), "{v}");
            assert!(v["error"].as_str().unwrap().contains("verified"), "{v}");
        }
        let service = axum::Router::new().route(
            "/v1/health",
            axum::routing::get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        );
        ready.set(service).unwrap();
        let (status, _, v) = call(&mut g, "/v1/health");
        assert_eq!((status, v["status"].as_str()), (200, Some("ok")));
    }

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
