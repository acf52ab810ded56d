//! The journal's cost: an experiment run in memory + outputs written (the path without a journal)
//! against the same run through a journalled run folder (`RunDir`), alternating, in one process.
//!
//! `cargo run --release --example journal_cost -- experiments/fig4a.toml [runs] [repeats]`
//! (results in docs/perf.md).

use dpbandits::experiment::durable::{Existing, RunDir, Shard};
use dpbandits::experiment::{self, ExperimentSpec, Plan};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let file = args
        .get(1)
        .ok_or("usage: journal_cost FILE [runs] [repeats]")?;
    let mut spec = ExperimentSpec::from_toml(&std::fs::read_to_string(file)?)?;
    if let Some(r) = args.get(2) {
        spec.runs = r.parse()?;
    }
    let repeats: usize = args.get(3).map_or(Ok(3), |r| r.parse())?;
    let plan = Plan::new(spec)?;
    let stop = AtomicBool::new(false);
    let (mut plain, mut journalled, mut inside) = (vec![], vec![], vec![]);
    for _ in 0..repeats {
        let d = tempfile::tempdir()?;
        let t = Instant::now();
        let outcome = experiment::run(&plan, &|| {});
        experiment::write_outputs(&plan, &outcome, d.path())?;
        plain.push(t.elapsed().as_secs_f64());

        let d = tempfile::tempdir()?;
        let t = Instant::now();
        let before = dpbandits::experiment::journal::time_spent();
        let dir = RunDir::open(d.path(), &plan, Shard::WHOLE, Existing::default())?;
        dir.run(&plan, &|| {}, &stop)?;
        journalled.push(t.elapsed().as_secs_f64());
        inside.push((dpbandits::experiment::journal::time_spent() - before).as_secs_f64());
        let j = std::fs::metadata(d.path().join("journal.bin"))?.len();
        eprintln!(
            "plain {:.3} s, journalled {:.3} s, journal {} bytes",
            plain.last().unwrap(),
            journalled.last().unwrap(),
            j
        );
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (p, j, w) = (med(&mut plain), med(&mut journalled), med(&mut inside));
    println!(
        "{}: {} jobs, median of {repeats}: plain {p:.4} s, journalled run folder {j:.4} s \
         (overhead {:+.1}%), of which inside the journal writer {w:.4} s ({:.1}% of plain)",
        plan.spec.name,
        plan.jobs(),
        100.0 * (j - p) / p,
        100.0 * w / p
    );
    Ok(())
}
