//! Per-round cost of Figure 4(c)'s loop, split: the decision sets alone, and the whole loop
//! (contexts + the file's 10 policies on common random numbers), for one run.
//!
//! `cargo run --release -p dpbandits --example fig4c_round -- [T] [run] [repeats]` prints the
//! nanoseconds per round of each part (median of `repeats`) and a checksum of the regret rows
//! (the same for any build that makes the same decisions).

use dpbandits::contextual::{
    ContextualEnvConfig, ContextualGaussianConfig, ContextualPolicyConfig, OfulConfig, OfulKind,
    SimPath, simulate_configs,
};
use dpbandits::sim::CheckpointGrid;
use std::time::Instant;

const SEED: u64 = 20240917;
const RHOS: [f64; 9] = [
    0.1,
    0.31622776601683794,
    0.5,
    1.0,
    3.1622776601683795,
    10.0,
    31.622776601683793,
    100.0,
    316.22776601683796,
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let t: u64 = args.get(1).map_or(1e6, |s| s.parse::<f64>().unwrap()) as u64;
    let run: u64 = args.get(2).map_or(0, |s| s.parse().unwrap());
    let repeats: usize = args.get(3).map_or(3, |s| s.parse().unwrap());
    let mut env_cfg = ContextualGaussianConfig::paper();
    env_cfg.instantiate(SEED).unwrap();
    let grid = CheckpointGrid::log(t, 120, &[]).unwrap();
    let (mut env_ns, mut all_ns) = (vec![], vec![]);
    let mut checksum = 0.0;
    for _ in 0..repeats {
        let mut env = env_cfg.build(SEED, run).unwrap();
        let start = Instant::now();
        let mut acc = 0.0;
        for r in 0..t {
            env.next_round(r);
            acc += env.best_mean();
        }
        env_ns.push(start.elapsed().as_nanos() as f64 / t as f64);
        std::hint::black_box(acc);

        let mut env = env_cfg.build(SEED, run).unwrap();
        let mut cfgs = vec![OfulConfig::paper(OfulKind::RsOful, f64::INFINITY)];
        for rho in RHOS {
            cfgs.push(OfulConfig::paper(OfulKind::AdacOful, rho));
        }
        for c in &mut cfgs {
            c.mode = dpbandits::contextual::PrivacyMode::Reproduction;
        }
        let refs: Vec<&dyn ContextualPolicyConfig> = cfgs
            .iter()
            .map(|c| c as &dyn ContextualPolicyConfig)
            .collect();
        let seeds: Vec<u64> = (0..refs.len() as u64).map(|i| 1000 + i).collect();
        let mut out = vec![vec![0.0; grid.points().len()]; refs.len()];
        let start = Instant::now();
        // Through the configurations: the OFUL family's batched driver, as in an experiment.
        let path = simulate_configs(env.as_mut(), &refs, &seeds, &grid, &mut out).unwrap();
        all_ns.push(start.elapsed().as_nanos() as f64 / t as f64);
        assert!(matches!(path, SimPath::Batched(_)), "{path:?}");
        checksum = out.iter().map(|r| r.iter().sum::<f64>()).sum::<f64>();
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (e, a) = (med(&mut env_ns), med(&mut all_ns));
    println!(
        "T = {t}: contexts {e:.1} ns/round, whole loop {a:.1} ns/round, policies {:.1} ns/policy-round; checksum {checksum:.17e}",
        (a - e) / 10.0
    );
}
