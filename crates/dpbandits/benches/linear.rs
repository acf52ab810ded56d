//! Linear bandits: design solver and whole-run cost (`cargo bench -p dpbandits --bench linear`).

use criterion::{Criterion, criterion_group, criterion_main};
use dpbandits::linear::unit_sphere;
use dpbandits::linear::{DesignOptions, GopeConfig, LinearInstance, NoisePlacement, g_optimal};
use dpbandits::rng::{Stream, stream_rng};
use dpbandits::sim::CheckpointGrid;
use nalgebra::DVector;
use std::hint::black_box;

fn arms(k: usize, d: usize) -> Vec<DVector<f64>> {
    let mut rng = stream_rng(1, Stream::Instance, &[0]);
    (0..k)
        .map(|_| DVector::from_vec(unit_sphere(d, &mut rng)))
        .collect()
}

fn bench(c: &mut Criterion) {
    for (k, d) in [(10, 3), (100, 10), (1000, 20)] {
        let pts = arms(k, d);
        c.bench_function(&format!("g_optimal K={k} d={d}"), |b| {
            b.iter(|| g_optimal(black_box(&pts), DesignOptions::default()).unwrap())
        });
    }
    // One AdaC-GOPE run of Figure 4(b) (K = 10, d = 3, T = 1e7, rho = 0.1, exact block sums).
    let pts: Vec<Vec<f64>> = arms(10, 3)
        .iter()
        .map(|a| a.iter().copied().collect())
        .collect();
    let theta = unit_sphere(3, &mut stream_rng(1, Stream::Instance, &[1]));
    let inst = LinearInstance::new(pts, theta, 1.0).unwrap();
    let grid = CheckpointGrid::log(10_000_000, 120, &[]).unwrap();
    let cfg = GopeConfig {
        clip_rewards: false,
        ..GopeConfig::new(NoisePlacement::Intermediate, 0.1)
    };
    let mut out = vec![0.0; grid.points().len()];
    let mut run = 0u64;
    c.bench_function("adac_gope run T=1e7 K=10 d=3", |b| {
        b.iter(|| {
            run += 1;
            cfg.simulate(&inst, run, run, &grid, &mut out).unwrap();
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
