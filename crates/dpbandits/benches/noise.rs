//! Cost per release of the two noise paths (issue 13): the simulation path (f64 Gaussian /
//! Laplace on the seeded Xoshiro noise stream) against the deployment path (exact discrete
//! Gaussian / discrete Laplace on ChaCha20 seeded by the OS, rewards on the 2^-20 grid), through
//! the `NoiseSource` API the policies call: one release of an episode mean of L = 1024 rewards at
//! several budgets, plus the raw CKS20 samplers at small and large scales.
//! `cargo bench -p dpbandits --bench noise`

use criterion::{Criterion, criterion_group, criterion_main};
use dpbandits::privacy::discrete::{Ratio, discrete_gaussian, discrete_laplace};
use dpbandits::privacy::{BoundaryMode, NoiseSource, RewardBoundary};
use dpbandits::rng::{Stream, stream_rng};
use std::hint::black_box;

const L: u64 = 1024;

fn sources() -> [(&'static str, NoiseSource); 2] {
    [
        ("simulation", NoiseSource::simulation(7)),
        ("deployment", NoiseSource::deployment(20).unwrap()),
    ]
}

fn releases(c: &mut Criterion) {
    let b = RewardBoundary::unit(BoundaryMode::Clip);
    // 700 of 1024 rewards equal to 1
    let sum = b
        .sum_of((0..L).map(|i| if i < 700 { 1.0 } else { 0.0 }))
        .unwrap();
    let mut g = c.benchmark_group("gaussian_release_L1024");
    for rho in [0.01, 1.0, 100.0] {
        for (name, mut src) in sources() {
            g.bench_function(format!("{name}/rho={rho}"), |bench| {
                bench.iter(|| {
                    black_box(
                        src.gaussian_mean(1.0 / L as f64, black_box(rho), &sum, &b)
                            .unwrap(),
                    )
                })
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("laplace_release_L1024");
    for eps in [0.1, 1.0, 10.0] {
        for (name, mut src) in sources() {
            g.bench_function(format!("{name}/epsilon={eps}"), |bench| {
                bench.iter(|| {
                    black_box(
                        src.laplace_mean(1.0 / L as f64, black_box(eps), &sum, &b)
                            .unwrap(),
                    )
                })
            });
        }
    }
    g.finish();
}

fn samplers(c: &mut Criterion) {
    let mut rng = stream_rng(1, Stream::Noise, &[]);
    let mut g = c.benchmark_group("cks20_samplers");
    for (name, sigma2) in [
        ("sigma=0.5", Ratio::new(1u32, 4u32).unwrap()),
        ("sigma=1e3", Ratio::integer(1_000_000u32)),
        // the AdaC-UCB calibration at rho = 0.5, k = 20: sigma^2 = 2^40
        ("sigma=2^20", Ratio::from_f64(2f64.powi(40)).unwrap()),
    ] {
        g.bench_function(format!("discrete_gaussian/{name}"), |bench| {
            bench.iter(|| black_box(discrete_gaussian(&sigma2, &mut rng)))
        });
    }
    for (name, scale) in [
        ("t=0.5", Ratio::new(1u32, 2u32).unwrap()),
        ("t=1e3", Ratio::integer(1000u32)),
        ("t=2^20", Ratio::integer(1u32 << 20)),
    ] {
        g.bench_function(format!("discrete_laplace/{name}"), |bench| {
            bench.iter(|| black_box(discrete_laplace(&scale, &mut rng)))
        });
    }
    g.finish();
}

criterion_group!(benches, releases, samplers);
criterion_main!(benches);
