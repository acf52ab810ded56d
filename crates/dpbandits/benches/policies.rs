//! Per-step cost of the per-step policies, and the cost of one episodic run at T = 1e7.
//!
//! `cargo bench -p dpbandits --bench policies`. Each "step" is one `choose`, one Bernoulli `pull`
//! and one `observe`, at steady state (after 10^4 warm-up rounds). Results and the machine are
//! recorded in docs/perf.md. `block_run` times whole runs in episode mode (exact block
//! commitments, `finite::blocks`) per policy at K = 5 and 100.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dpbandits::finite::simulate_finite;
use dpbandits::finite::{AdaCUcbConfig, KlUcbConfig, PolicyConfig, ThompsonConfig, Ucb1Config};
use dpbandits::finite::{Bernoulli, Environment};
use dpbandits::sim::{CheckpointGrid, SimMode};
use std::hint::black_box;

fn means(k: usize) -> Vec<f64> {
    (0..k)
        .map(|i| 0.9 - 0.8 * i as f64 / (k.max(2) - 1) as f64)
        .collect()
}

fn per_step(c: &mut Criterion) {
    let mut g = c.benchmark_group("step");
    let configs: Vec<Box<dyn PolicyConfig>> = vec![
        Box::new(Ucb1Config::default()),
        Box::new(KlUcbConfig::default()),
        Box::new(ThompsonConfig::default()),
    ];
    for cfg in &configs {
        for k in [5usize, 100] {
            g.bench_with_input(BenchmarkId::new(cfg.label(), k), &k, |b, &k| {
                let mut env = Bernoulli::new(means(k), 1).unwrap();
                let mut p = cfg.build(k, 2).unwrap();
                let mut t = 0u64;
                let mut step = |t: &mut u64| {
                    let pull = p.choose(*t);
                    let r = env.pull(pull.arm, *t);
                    p.observe(pull.arm, r).unwrap();
                    *t += 1;
                    pull.arm
                };
                for _ in 0..10_000 {
                    step(&mut t);
                }
                b.iter(|| black_box(step(&mut t)));
            });
        }
    }
    // Reference: the environment draw alone.
    g.bench_function("bernoulli_pull_only", |b| {
        let mut env = Bernoulli::new(means(5), 1).unwrap();
        let mut t = 0u64;
        b.iter(|| {
            t += 1;
            black_box(env.pull((t % 5) as usize, t))
        });
    });
    g.finish();
}

fn episodic_run(c: &mut Criterion) {
    let mut g = c.benchmark_group("run");
    g.sample_size(30);
    let grid = CheckpointGrid::log(10_000_000, 120, &[]).unwrap();
    for (name, cfg) in [
        ("adac_ucb(rho=0.1)/T=1e7", AdaCUcbConfig::private(0.1)),
        ("adaptive_ucb/T=1e7", AdaCUcbConfig::non_private()),
    ] {
        g.bench_function(name, |b| {
            let mut seed = 0;
            b.iter(|| {
                seed += 1;
                let mut env = Bernoulli::new(vec![0.75, 0.625, 0.5, 0.375, 0.25], seed).unwrap();
                let mut p = cfg.build(5, seed).unwrap();
                let mut out = vec![0.0; grid.points().len()];
                simulate_finite(&mut env, p.as_mut(), &grid, SimMode::Episodes, &mut out).unwrap();
                black_box(out[out.len() - 1])
            });
        });
    }
    g.finish();
}

/// Whole runs in episode mode (the simulator's path: exact block commitments for UCB1 and kl-UCB,
/// `finite::blocks`), per policy at K = 5 and 100, means 0.75 .. 0.25. Divide by T for the cost
/// per round.
fn block_run(c: &mut Criterion) {
    let mut g = c.benchmark_group("block_run");
    g.sample_size(10);
    let configs: Vec<(Box<dyn PolicyConfig>, u64)> = vec![
        (Box::new(Ucb1Config::default()), 1_000_000),
        (Box::new(KlUcbConfig::default()), 1_000_000),
        (Box::new(ThompsonConfig::default()), 100_000),
    ];
    for (cfg, horizon) in &configs {
        let grid = CheckpointGrid::log(*horizon, 100, &[]).unwrap();
        for k in [5usize, 100] {
            let id = BenchmarkId::new(format!("{}/T={horizon}", cfg.label()), k);
            g.bench_with_input(id, &k, |b, &k| {
                let means: Vec<f64> = (0..k)
                    .map(|i| 0.75 - 0.5 * i as f64 / (k - 1) as f64)
                    .collect();
                let mut seed = 0;
                b.iter(|| {
                    seed += 1;
                    let mut env = Bernoulli::new(means.clone(), seed).unwrap();
                    let mut p = cfg.build(k, seed).unwrap();
                    let mut out = vec![0.0; grid.points().len()];
                    simulate_finite(&mut env, p.as_mut(), &grid, SimMode::Episodes, &mut out)
                        .unwrap();
                    black_box(out[out.len() - 1])
                });
            });
        }
    }
    g.finish();
}

criterion_group!(benches, per_step, episodic_run, block_run);
criterion_main!(benches);
