//! `dpbandits replay`: argument parsing and printing around `dpbandits::offline`
//! (docs/offline.md).

use anyhow::{Context, Result, bail};
use dpbandits::offline::{self, Format, Rejection, ReplayOptions, Target, obd::Slot};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct ReplayArgs {
    /// The log: a CSV file (`--format csv`: header `action,reward,propensity[,x0,...]`) or an
    /// Open Bandit Dataset campaign folder or CSV (`--format obd`, e.g. obd/random/men).
    #[arg(long)]
    log: PathBuf,
    /// The log's layout: csv or obd.
    #[arg(long, default_value = "csv")]
    format: String,
    /// The registry kind to replay (a finite-armed or contextual kind, `dpbandits list`).
    #[arg(long, conflicts_with = "target")]
    kind: Option<String>,
    /// A parameter of the kind, `key=value` (repeatable), e.g. `--param rho=0.5`.
    #[arg(long = "param", requires = "kind")]
    params: Vec<String>,
    /// A fixed target policy instead of a kind: comma-separated action probabilities
    /// (`0,1,0` always plays action 1).
    #[arg(long)]
    target: Option<String>,
    /// OBD positions kept as events: all, or 1, 2 or 3 (left, centre, right).
    #[arg(long, default_value = "all")]
    position: String,
    /// Number of actions (default: OBD's item_context.csv, else the largest logged action + 1).
    #[arg(long)]
    arms: Option<usize>,
    /// Master seed of the replay (rejection coins, target draws, the policy's seed).
    #[arg(long, default_value_t = 20240917)]
    seed: u64,
    /// Two-sided confidence of the intervals.
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Rejection sampling in replay: auto (on when the propensities differ), on, off.
    #[arg(long, default_value = "auto")]
    rejection: String,
    /// Repetitions of a registry kind's replay over seeds (the spread; >= 1).
    #[arg(long, default_value_t = 10)]
    replays: u32,
    /// The switch-DR threshold: events with an importance weight above it use the reward model
    /// only (> 0; inf: switch-DR is DR).
    #[arg(long, default_value_t = 100.0)]
    switch_tau: f64,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub(crate) fn replay(a: ReplayArgs) -> Result<ExitCode> {
    let format = Format::parse(&a.format).context("--format")?;
    let slot = Slot::parse(&a.position).context("--position")?;
    let rejection = Rejection::parse(&a.rejection).context("--rejection")?;
    if a.replays == 0 {
        bail!("--replays {}: expected an integer >= 1", a.replays);
    }
    if a.switch_tau.is_nan() || a.switch_tau <= 0.0 {
        bail!(
            "--switch-tau {}: expected a number > 0 (inf: switch-DR is DR)",
            a.switch_tau
        );
    }
    if !(a.confidence > 0.0 && a.confidence < 1.0) {
        bail!("--confidence {}: expected a number in (0, 1)", a.confidence);
    }
    let target = match (&a.kind, &a.target) {
        (Some(kind), None) => Target::Kind {
            kind: kind.clone(),
            params: dpbandits::audit::parse_params(a.params.iter().map(String::as_str))
                .context("--param")?,
        },
        (None, Some(t)) => Target::Fixed(offline::parse_target(t).context("--target")?),
        _ => bail!("give --kind KIND (a registry kind) or --target P0,P1,... (a fixed policy)"),
    };
    let data = offline::load(&a.log, format, slot, a.arms)
        .with_context(|| format!("--log {}", a.log.display()))?;
    let opts = ReplayOptions {
        seed: a.seed,
        confidence: a.confidence,
        rejection,
        replays: a.replays,
        switch_tau: a.switch_tau,
    };
    let report = offline::evaluate(&data, &target, &opts).with_context(|| match &a.kind {
        Some(k) => format!("--kind {k}"),
        None => "--target".into(),
    })?;
    print!("{}", report.table());
    if let Some(path) = a.json {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::write(&path, text).with_context(|| format!("--json {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
