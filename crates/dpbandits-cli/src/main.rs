//! The `dpbandits` command line: a thin layer over the library.
//!
//! * `dpbandits run <file.toml> [--out DIR] [--threads N] [--runs N] [--quiet]`
//!   `[--resume] [--force] [--shard i/n] [--allow-large]`
//! * `dpbandits run --default` runs the embedded default experiment (the paper's Figure 4(a)).
//! * `dpbandits merge DIR... --out OUT` merges the folders of `--shard 0/n .. n-1/n`.
//! * `dpbandits list` shows every algorithm with its paper reference, privacy claim and parameters.
//! * `dpbandits completions bash|zsh|fish` prints a shell completion script.
//! * `dpbandits audit KIND --param rho=0.5 [--runs N] [--seed S] [--delta D ...]
//!   [--noise-multiplier M] [--json FILE]`: the empirical privacy auditor (`docs/privacy.md`).
//!
//! * `dpbandits session --kind K [--param key=value ...] [--seed S] [--while-pending
//!   wait|pipeline]`: one online session (`dpbandits::session::Session`) driven by JSON lines on
//!   stdin (`{"decide": null}`, `{"decide": [[...], ...]}`, `{"observe": [arm, reward]}`,
//!   `{"observe_decision": [decision_id, reward]}`, `{"snapshot": null}`), one JSON line out per
//!   call (`{"decision_id": 1, "arm": 2}`, `{"stop": 1}`, `{"ok": true}`, `{"error": "..."}`).
//! * `dpbandits replay --log FILE|DIR --format csv|obd (--kind K [--param k=v ...] | --target
//!   P0,P1,...) [--position all|1|2|3] [--seed S] [--json OUT]`: offline evaluation on logged
//!   feedback (docs/offline.md).
//!
//! * `dpbandits serve --db PATH [--listen 127.0.0.1:PORT] [--admin-token-file F]`: the decision
//!   service (docs/service.md); `dpbandits audit-log verify --db PATH` checks its audit chain.
//!
//! Exit codes: 0 done; 1 some configurations failed (the others were written); 2 an error
//! (printed with its whole chain); 130 stopped by SIGINT/SIGTERM/SIGHUP (`status =
//! "interrupted"`, continue with `--resume`). `audit`: 1 fail, 3 over-noised (white-box), 4
//! inconclusive (the design could not have refuted the claim; the table says what to change).

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use dpbandits::config::Setting;
use dpbandits::experiment::durable::{self, Existing, Finished, RunDir, Shard};
use dpbandits::experiment::{self, Limits, Plan};
use dpbandits::registry;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

mod audit;
mod bounds;
mod pool;
mod replay;
mod serve;
mod session;

use pool::thread_pool;

/// The experiment run by `dpbandits run --default`: the paper's finite-armed Figure 4(a).
const DEFAULT_EXPERIMENT: &str = include_str!("../../../experiments/fig4a.toml");

#[derive(Parser, Debug)]
#[command(
    name = "dpbandits",
    version,
    about = "Differentially private bandit algorithms: run experiments, list algorithms"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run an experiment file and write manifest.json, summary.csv and plots.
    Run {
        /// The experiment file (TOML). Omit with --default.
        file: Option<PathBuf>,
        /// Run the embedded default experiment (experiments/fig4a.toml).
        #[arg(long, conflicts_with = "file")]
        default: bool,
        /// Output folder (default: `results/<name>`).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Worker threads (default: all cores). Results do not depend on it.
        #[arg(long)]
        threads: Option<usize>,
        /// Override the number of runs of the file (e.g. for a quick look; `1e3`, `1_000` allowed).
        #[arg(long, value_parser = experiment::parse_count, allow_hyphen_values = true)]
        runs: Option<u64>,
        /// Override the horizon of the file (`1e5`, `100_000` allowed). Breakpoints and extra
        /// checkpoints given in rounds are rescaled; for BAI files it is the sample cap.
        #[arg(long, value_parser = experiment::parse_count, allow_hyphen_values = true)]
        horizon: Option<u64>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// Continue the run journalled in --out (after a kill, an interrupt or a failure): reuse
        /// every finished job, run the rest.
        #[arg(long)]
        resume: bool,
        /// Clear --out first if it holds a dpbandits run (of any experiment) and start over.
        #[arg(long, conflicts_with = "resume")]
        force: bool,
        /// Run only shard i of n (jobs j with j mod n = i) and write its journal; combine the
        /// shard folders with `dpbandits merge`.
        #[arg(long, value_name = "i/n")]
        shard: Option<String>,
        /// Lift the safety limits on configurations, checkpoints, memory and simulated rounds.
        #[arg(long)]
        allow_large: bool,
    },
    /// Merge the folders of `run --shard 0/n` .. `n-1/n` into one results folder (byte-identical
    /// to the unsharded run).
    Merge {
        /// The shard folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// Clear --out first if it holds a dpbandits run.
        #[arg(long)]
        force: bool,
        /// Worker threads for the outputs.
        #[arg(long)]
        threads: Option<usize>,
    },
    /// List algorithms and environments with their references, privacy claims and parameters.
    List,
    /// Print a shell completion script: `dpbandits completions bash > ~/.local/share/bash-completion/completions/dpbandits`
    /// (zsh: into a folder of `$fpath` as `_dpbandits`; fish: `~/.config/fish/completions/dpbandits.fish`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Empirical privacy audit of a private kind: a lower bound on epsilon from neighbouring
    /// reward tables (docs/privacy.md). Exit code 1 when the bound exceeds the claim.
    Audit(audit::AuditArgs),
    /// One online session of any kind: JSON calls on stdin (`{"decide": null}`, `{"observe":
    /// [arm, reward]}`, ...), one JSON line out per call (`{"decision_id": 1, "arm": 2}`,
    /// `{"ok": true}`, ...).
    ///
    /// The policy the Python `Policy` holds (`dpbandits::session::Session`), driven call by call:
    /// the kind's parameters and the problem's keys are `--param`s.
    Session(session::SessionArgs),
    /// Run the private decision service (HTTP/JSON, state in SQLite; docs/service.md).
    Serve(serve::ServeArgs),
    /// Offline evaluation on logged feedback: replay, IPS, SNIPS, DR (docs/offline.md).
    Replay(replay::ReplayArgs),
    /// Audit log of a service database.
    #[command(name = "audit-log", subcommand)]
    AuditLog(serve::AuditLogCommand),
    /// A consistent copy of a service database, under load (`VACUUM INTO`), verified before it
    /// is renamed into place (docs/service.md, "Backup and restore").
    Backup(serve::BackupArgs),
    /// Operating characteristics of candidate trial designs by simulation (a `[design]` file:
    /// docs/trial-design.md): a tidy CSV, figures and a self-contained HTML report.
    Design {
        /// The design file (TOML with a `[design]` table).
        file: PathBuf,
        /// Output folder (default: `results/<file stem>`).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Worker threads (default: all cores). Results do not depend on it.
        #[arg(long)]
        threads: Option<usize>,
        /// Override the number of simulated trials per cell (`1e3` allowed).
        #[arg(long, value_parser = experiment::parse_count, allow_hyphen_values = true)]
        runs: Option<u64>,
        /// Replace --out if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Characteristic times and the lower bound of fixed-confidence BAI under eps-global DP.
    Bounds {
        /// Bernoulli means, comma-separated, each in (0, 1), unique best arm.
        #[arg(
            long,
            value_delimiter = ',',
            allow_hyphen_values = true,
            required = true
        )]
        means: Vec<f64>,
        /// Privacy budget eps > 0.
        #[arg(long, allow_hyphen_values = true)]
        epsilon: f64,
        /// Risk delta in (0, 1).
        #[arg(long, default_value_t = 0.01, allow_hyphen_values = true)]
        delta: f64,
    },
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Writing to a closed pipe (`dpbandits list | head`) ends the process quietly, as it ends
/// other Unix tools, instead of a panic in `println!` (Rust ignores SIGPIPE by default). Not for
/// `serve`: a client that goes away must not end the service (its sockets see EPIPE instead).
fn default_sigpipe() {
    // SAFETY: sets a signal's disposition to its default; called first thing in `real_main`,
    // before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn real_main() -> Result<ExitCode> {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        default_sigpipe();
    }
    match cli.command {
        Command::List => {
            list();
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit(args) => audit::audit(args),
        Command::Session(args) => session::session(args),
        Command::Serve(args) => serve::serve(args),
        Command::Replay(args) => replay::replay(args),
        Command::AuditLog(cmd) => serve::audit_log(cmd),
        Command::Backup(args) => serve::backup(args),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "dpbandits",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Bounds {
            means,
            epsilon,
            delta,
        } => bounds::bounds(means, epsilon, delta),
        Command::Design {
            file,
            out,
            threads,
            runs,
            force,
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let mut spec = experiment::design::DesignSpec::from_toml(&text)
                .with_context(|| file.display().to_string())?;
            if let Some(r) = runs {
                spec.runs = r;
                spec.validate()
                    .map_err(|e| anyhow::anyhow!("--runs: {e}"))?;
            }
            let out = out.unwrap_or_else(|| {
                PathBuf::from("results").join(file.file_stem().unwrap_or_default())
            });
            let threads = threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            });
            let cells = experiment::design::run(&spec, threads)?;
            let files = experiment::design::write(&spec, &cells, &out, force)?;
            for f in files {
                println!("{}", f.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            file,
            default,
            out,
            threads,
            runs,
            horizon,
            quiet,
            resume,
            force,
            shard,
            allow_large,
        } => {
            let (text, source) = match (&file, default) {
                (Some(f), false) => (
                    std::fs::read_to_string(f)
                        .with_context(|| format!("reading {}", f.display()))?,
                    f.display().to_string(),
                ),
                (None, true) => (
                    DEFAULT_EXPERIMENT.to_string(),
                    "embedded default (experiments/fig4a.toml)".into(),
                ),
                _ => bail!(
                    "give an experiment file (e.g. `dpbandits run experiments/fig4a.toml`) or --default"
                ),
            };
            if text.lines().any(|l| l.trim() == "[design]") {
                bail!(
                    "{source} is a design file ([design]): run it with `dpbandits design {source}`"
                );
            }
            let mut spec =
                experiment::ExperimentSpec::from_toml(&text).with_context(|| source.clone())?;
            spec.with_overrides(runs, horizon).map_err(|e| match e {
                dpbandits::Error::Param {
                    field,
                    value,
                    expected,
                } => anyhow::anyhow!("--{field} {value}: expected {expected}"),
                e => e.into(),
            })?;
            let shard = match shard {
                Some(s) => Shard::parse(&s)?,
                None => Shard::WHOLE,
            };
            let limits = if allow_large {
                Limits::none()
            } else {
                Limits::default()
            };
            let plan = Plan::with_limits(spec, &limits).with_context(|| source.clone())?;
            let out = out.unwrap_or_else(|| PathBuf::from("results").join(&plan.spec.name));
            let pool = thread_pool(threads)?;
            install_signal_handler();
            let dir = RunDir::open(&out, &plan, shard, Existing { resume, force })?;
            let resume_hint = format!(
                "dpbandits run {} --out {}{} --resume",
                file.as_ref()
                    .map_or("--default".to_string(), |f| f.display().to_string()),
                out.display(),
                if shard.count > 1 {
                    format!(" --shard {shard}")
                } else {
                    String::new()
                }
            );
            run_plan(&plan, dir, shard, &pool, quiet, &resume_hint)
        }
        Command::Merge {
            dirs,
            out,
            force,
            threads,
        } => {
            let (spec, records) = durable::load_shards(&dirs)?;
            let plan = Plan::with_limits(spec, &Limits::none())
                .context("planning the experiment stored in the shards")?;
            let pool = thread_pool(threads)?;
            let mut dir = RunDir::open(
                &out,
                &plan,
                Shard::WHOLE,
                Existing {
                    resume: false,
                    force,
                },
            )?;
            dir.import(&plan, records)?;
            run_plan(&plan, dir, Shard::WHOLE, &pool, true, "")
        }
    }
}

/// Set by SIGINT/SIGTERM/SIGHUP: no new job starts; a second signal exits at once (the journal
/// stays valid up to its last whole record).
static STOP: AtomicBool = AtomicBool::new(false);

fn install_signal_handler() {
    let _ = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!(
            "\nstopping: finishing the running jobs and flushing the journal (signal again to exit at once)"
        );
    });
}

fn run_plan(
    plan: &Plan,
    dir: RunDir,
    shard: Shard,
    pool: &rayon::ThreadPool,
    quiet: bool,
    resume_hint: &str,
) -> Result<ExitCode> {
    let jobs = dir.jobs();
    let todo = jobs - dir.reused;
    let work = plan.work();
    let share = todo as f64 / plan.jobs().max(1) as f64;
    eprintln!(
        "{}: {} configurations x {} runs, horizon {}, {} threads, config hash {}{}",
        plan.spec.name,
        plan.cells.len(),
        plan.spec.runs,
        plan.spec.horizon,
        pool.current_num_threads(),
        dir.config_hash(),
        if shard.count > 1 {
            format!(", shard {shard} ({jobs} of {} jobs)", plan.jobs())
        } else {
            String::new()
        }
    );
    if dir.reused > 0 || dir.discarded_tail {
        eprintln!(
            "resuming: {} of {jobs} jobs journalled{}",
            dir.reused,
            if dir.discarded_tail {
                " (a torn record at the journal's end was discarded)"
            } else {
                ""
            }
        );
    }
    let estimate = format!("~{:.2e} {}", work.steps * share, work.unit);
    eprintln!("work: {todo} jobs to run, {estimate}");
    let bar = progress_bar(todo, quiet);
    bar.set_message(format!(
        "{:.1e} {}",
        work.steps * share,
        work.unit.split(' ').next().unwrap_or("")
    ));
    // Test hook (documented in tests/suite/durable.rs): each job sleeps this many milliseconds
    // after it finishes, so tests can signal or lock a run that is surely still running.
    let slow = std::env::var("DPBANDITS_TEST_SLOW_JOBS_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(std::time::Duration::from_millis);
    let start = Instant::now();
    let finished = pool.install(|| {
        dir.run(
            plan,
            &|| {
                if let Some(d) = slow {
                    std::thread::sleep(d);
                }
                bar.inc(1)
            },
            &STOP,
        )
    })?;
    bar.finish_and_clear();
    let elapsed = start.elapsed();
    let (outcome, files) = match finished {
        Finished::Interrupted { done, jobs } => {
            eprintln!(
                "interrupted: {done} of {jobs} jobs journalled (status = interrupted); continue with `{resume_hint}`"
            );
            return Ok(ExitCode::from(130));
        }
        Finished::Shard { jobs, errors } => {
            eprintln!(
                "shard {shard}: {jobs} jobs journalled in {:.2} s; combine the shards with `dpbandits merge DIR... --out OUT`",
                elapsed.as_secs_f64()
            );
            for (j, e) in &errors {
                eprintln!("error: job {j}: {e}");
            }
            return Ok(if errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
        Finished::Outputs { outcome, files } => (outcome, files),
    };
    eprintln!(
        "simulated and written in {:.2} s; wrote:",
        elapsed.as_secs_f64()
    );
    for f in &files {
        println!("{}", f.display());
    }
    if plan.setting == Setting::Bai {
        let capped = outcome
            .cells
            .iter()
            .flatten()
            .flatten()
            .filter(|row| dpbandits::bai::OutcomeRow::from_row(row).capped)
            .count();
        if capped > 0 {
            eprintln!(
                "warning: {capped} runs hit the sample cap (horizon = {}); counted in the 'capped' column",
                plan.spec.horizon
            );
        }
    }
    let errors = outcome.errors(plan);
    if errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for (label, e) in &errors {
            eprintln!("error: {label}: {e}");
        }
        eprintln!(
            "{} of {} configurations failed; the others were written",
            errors.len(),
            plan.cells.len()
        );
        Ok(ExitCode::from(1))
    }
}

/// A progress bar over `jobs` jobs with an ETA (hidden with `--quiet`); its message shows the
/// work estimate.
pub(crate) fn progress_bar(jobs: u64, quiet: bool) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(jobs)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} jobs, {msg} ({eta} left)",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

fn list() {
    let mut settings: Vec<Setting> = vec![];
    for e in registry::POLICIES {
        if !settings.contains(&e.setting()) {
            settings.push(e.setting());
        }
    }
    for s in settings {
        println!("{s} algorithms:");
        for e in registry::POLICIES.iter().filter(|e| e.setting() == s) {
            let i = e.info;
            println!("  {:<16} {}", i.kind, i.name);
            println!("  {:<16}   source:     {}", "", i.source);
            println!("  {:<16}   reference:  {}", "", i.reference);
            println!("  {:<16}   privacy:    {}", "", i.privacy);
            let p = e.parameters();
            if !p.is_empty() {
                println!("  {:<16}   parameters: {p}", "");
            }
            if !i.example.is_empty() {
                println!(
                    "  {:<16}   example:    {}",
                    "",
                    i.example.replace('\n', ", ")
                );
            }
        }
        println!();
    }
    println!("environments:");
    for e in registry::ENVIRONMENTS {
        println!(
            "  {:<20} [{}] {}",
            e.info.kind, e.info.setting, e.info.description
        );
        println!("  {:<20} source: {}", "", e.info.source);
    }
}
