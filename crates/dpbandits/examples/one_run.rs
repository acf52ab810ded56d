//! One finite-armed run, timed: the dpbandits side of `benches/side_by_side.sh`.
//!
//! `cargo run --release -p dpbandits --example one_run -- POLICY K T [steps|episodes] [seed]`
//! with POLICY one of `ucb1`, `kl_ucb`, `thompson`; arms Bernoulli with means evenly spaced from
//! 0.75 down to 0.25 (K = 5: 0.75, 0.625, 0.5, 0.375, 0.25). Prints one line:
//! `policy K T mode seconds decisions final_regret` (decisions = `choose` calls that opened a
//! commitment, counted in a second, untimed run with the same seeds; the simulator is
//! `finite::simulate_finite`, the checkpoint grid has 100 points).

use dpbandits::finite::{
    Bernoulli, KlUcbConfig, Policy, PolicyConfig, Pull, ThompsonConfig, Ucb1Config, simulate_finite,
};
use dpbandits::privacy::{PrivacyGuarantee, RewardBoundary, RewardSum};
use dpbandits::sim::{CheckpointGrid, SimMode};
use std::time::Instant;

/// Counts the commitments the wrapped policy opens.
#[derive(Debug)]
struct Counting {
    inner: Box<dyn Policy>,
    left: u64,
    decisions: u64,
}

impl Policy for Counting {
    fn num_arms(&self) -> usize {
        self.inner.num_arms()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.inner.guarantee()
    }
    fn choose(&mut self, t: u64) -> Pull {
        let p = self.inner.choose(t);
        if self.left == 0 {
            self.decisions += 1;
            self.left = p.steps;
        }
        p
    }
    fn observe(&mut self, arm: usize, reward: f64) -> dpbandits::Result<()> {
        self.left -= 1;
        self.inner.observe(arm, reward)
    }
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> dpbandits::Result<()> {
        self.left -= sum.n();
        self.inner.observe_batch(arm, sum)
    }
    fn boundary(&self) -> RewardBoundary {
        self.inner.boundary()
    }
    fn enable_blocks(&mut self, range: (f64, f64)) {
        self.inner.enable_blocks(range)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: one_run POLICY(ucb1|kl_ucb|thompson) K T [steps|episodes] [seed]";
    let policy = args.first().expect(usage).as_str();
    let k: usize = args
        .get(1)
        .expect(usage)
        .parse()
        .expect("K: an integer >= 2");
    let t: u64 = args
        .get(2)
        .expect(usage)
        .parse::<f64>()
        .expect("T: a number") as u64;
    let mode = match args.get(3).map_or("episodes", String::as_str) {
        "steps" => SimMode::Steps,
        "episodes" => SimMode::Episodes,
        m => panic!("mode {m}: steps or episodes"),
    };
    let seed: u64 = args
        .get(4)
        .map_or(1, |s| s.parse().expect("seed: an integer"));
    let cfg: Box<dyn PolicyConfig> = match policy {
        "ucb1" => Box::new(Ucb1Config::default()),
        "kl_ucb" => Box::new(KlUcbConfig::default()),
        "thompson" => Box::new(ThompsonConfig::default()),
        p => panic!("policy {p}: {usage}"),
    };
    let means: Vec<f64> = (0..k)
        .map(|i| 0.75 - 0.5 * i as f64 / (k - 1) as f64)
        .collect();
    let grid = CheckpointGrid::log(t, 100, &[]).expect("grid");
    let mut out = vec![0.0; grid.points().len()];
    // Timed: the bare policy (as the simulator runs it).
    let mut env = Bernoulli::new(means.clone(), seed).expect("environment");
    let mut p = cfg.build(k, seed).expect("policy");
    let start = Instant::now();
    simulate_finite(&mut env, p.as_mut(), &grid, mode, &mut out).expect("run");
    let secs = start.elapsed().as_secs_f64();
    // Untimed: the same run again (same seeds, same result) counting the commitments.
    let mut env = Bernoulli::new(means, seed).expect("environment");
    let mut p = Counting {
        inner: cfg.build(k, seed).expect("policy"),
        left: 0,
        decisions: 0,
    };
    let mut again = vec![0.0; out.len()];
    simulate_finite(&mut env, &mut p, &grid, mode, &mut again).expect("run");
    assert_eq!(again, out, "the counting wrapper changes nothing");
    println!(
        "{policy} {k} {t} {} {secs:.6} {} {:.1}",
        if mode == SimMode::Steps {
            "steps"
        } else {
            "episodes"
        },
        p.decisions,
        out[out.len() - 1]
    );
}
