//! Step cost of the locally private learners (issue 6): 100k rounds on the rotating-best-arm
//! instance (K = 3), including the environment draw and the randomizer.
//! `cargo bench -p dpbandits --bench ldp`

use criterion::{Criterion, criterion_group, criterion_main};
use dpbandits::finite::{CfConfig, DUcbConfig, PolicyConfig, SwUcbConfig};
use dpbandits::finite::{Environment, PiecewiseBernoulli};
use std::hint::black_box;

fn run(cfg: &dyn PolicyConfig, horizon: u64) -> usize {
    let q = horizon / 4;
    let mut env = PiecewiseBernoulli::new(
        vec![
            vec![0.8, 0.5, 0.2],
            vec![0.2, 0.8, 0.5],
            vec![0.5, 0.2, 0.8],
            vec![0.8, 0.5, 0.2],
        ],
        &[q + 1, 2 * q + 1, 3 * q + 1],
        None,
        1,
    )
    .unwrap();
    let mut p = cfg.build(3, 2).unwrap();
    let mut last = 0;
    for t in 0..horizon {
        let a = p.choose(t).arm;
        let r = env.pull(a, t);
        p.observe(a, r).unwrap();
        last = a;
    }
    last
}

fn bench(c: &mut Criterion) {
    let horizon = 100_000;
    let mut g = c.benchmark_group("ldp_100k_steps");
    g.sample_size(10);
    let cfgs: Vec<(&str, Box<dyn PolicyConfig>)> = vec![
        (
            "sw_klucb_cf_eps1_w1166",
            Box::new(CfConfig::sw_klucb_cf(1.0, 1166)),
        ),
        ("kl_ucb_cf_eps1", Box::new(CfConfig::kl_ucb_cf(1.0))),
        (
            "sw_ucb_w4292",
            Box::new(SwUcbConfig {
                window: 4292,
                b: 1.0,
                xi: 0.6,
            }),
        ),
        (
            "d_ucb",
            Box::new(DUcbConfig {
                gamma: 0.999567,
                b: 1.0,
                xi: 0.6,
            }),
        ),
    ];
    for (name, cfg) in &cfgs {
        g.bench_function(*name, |b| b.iter(|| black_box(run(cfg.as_ref(), horizon))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
