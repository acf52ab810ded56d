//! The `dpbandits` command line: a thin layer over the library.
//!
//! * `dpbandits run <file.toml> [--out DIR] [--threads N] [--runs N] [--quiet]`
//! * `dpbandits run --default` runs the embedded default experiment (the paper's Figure 4(a)).
//! * `dpbandits list` shows every algorithm with its paper reference and privacy claim.
//! * `dpbandits audit KIND --param rho=0.5 [--runs N] [--seed S] [--delta D ...]
//!   [--noise-multiplier M] [--json FILE]`: the empirical privacy auditor (`docs/privacy.md`).
//!
//! Errors are printed with their whole chain and exit code 2.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use dpbandits::config::Setting;
use dpbandits::experiment::{self, Plan};
use dpbandits::registry;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod audit;
mod bounds;

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
        /// Override the number of runs of the file (e.g. for a quick look).
        #[arg(long)]
        runs: Option<u64>,
        /// Override the horizon of the file.
        #[arg(long)]
        horizon: Option<u64>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// List algorithms and environments with their references and privacy claims.
    List,
    /// Empirical privacy audit of a private kind: a lower bound on epsilon from neighbouring
    /// reward tables (docs/privacy.md). Exit code 1 when the bound exceeds the claim.
    Audit(audit::AuditArgs),
    /// Characteristic times and the lower bound of fixed-confidence BAI under eps-global DP.
    Bounds {
        /// Bernoulli means, comma-separated, each in (0, 1), unique best arm.
        #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
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

fn real_main() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::List => {
            list();
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit(args) => audit::audit(args),
        Command::Bounds {
            means,
            epsilon,
            delta,
        } => bounds::bounds(means, epsilon, delta),
        Command::Run {
            file,
            default,
            out,
            threads,
            runs,
            horizon,
            quiet,
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
            let mut spec =
                experiment::ExperimentSpec::from_toml(&text).with_context(|| source.clone())?;
            if let Some(r) = runs {
                if r == 0 {
                    bail!("--runs 0: expected an integer >= 1");
                }
                spec.runs = r;
            }
            if let Some(h) = horizon {
                if h == 0 {
                    bail!("--horizon 0: expected an integer >= 1");
                }
                spec.horizon = h;
                for f in &mut spec.figure {
                    if let experiment::FigureSpec::GapVsParam { horizons, .. } = f {
                        horizons.retain(|&x| x <= h);
                        if horizons.is_empty() {
                            horizons.push(h);
                        }
                    }
                }
                spec.checkpoints.extra.retain(|&x| x <= h);
            }
            let plan = Plan::new(spec).with_context(|| source.clone())?;
            let out = out.unwrap_or_else(|| PathBuf::from("results").join(&plan.spec.name));
            let pool = thread_pool(threads)?;
            run_plan(&plan, &out, &pool, quiet)
        }
    }
}

fn run_plan(
    plan: &Plan,
    out: &std::path::Path,
    pool: &rayon::ThreadPool,
    quiet: bool,
) -> Result<ExitCode> {
    let jobs = plan.jobs();
    eprintln!(
        "{}: {} configurations x {} runs, horizon {}, {} threads",
        plan.spec.name,
        plan.cells.len(),
        plan.spec.runs,
        plan.spec.horizon,
        pool.current_num_threads()
    );
    let bar = progress_bar(jobs, quiet);
    let start = Instant::now();
    let outcome = pool.install(|| experiment::run(plan, &|| bar.inc(1)));
    bar.finish_and_clear();
    let elapsed = start.elapsed();
    let files = experiment::write_outputs(plan, &outcome, out).context("writing results")?;
    eprintln!("simulated in {:.2} s; wrote:", elapsed.as_secs_f64());
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

/// The worker pool of `--threads N` (default: all cores); 0 is refused.
pub(crate) fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool> {
    if threads == Some(0) {
        bail!("--threads 0: expected an integer >= 1");
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .context("starting worker threads")
}

/// A progress bar over `jobs` runs (hidden with `--quiet`).
pub(crate) fn progress_bar(jobs: u64, quiet: bool) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(jobs)
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} runs ({eta} left)")
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
