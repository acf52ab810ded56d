//! Per-round cost of the contextual setting (d = 3, K = 10, the paper's Figure 4(c) instance):
//! drawing one round's decision set alone, against one OFUL / RS-OFUL / AdaC-OFUL step
//! (`choose` + `observe`) on pre-drawn decision sets.
//!
//! Run: `cargo bench -p dpbandits --bench contextual`. Results are recorded in docs/contextual.md.

use criterion::{Criterion, criterion_group, criterion_main};
use dpbandits::contextual::{
    ActionSet, ContextualEnvConfig, ContextualGaussianConfig, ContextualPolicy,
    ContextualPolicyConfig, OfulConfig, OfulKind,
};
use std::hint::black_box;

const RING: usize = 4096;

fn env_cfg() -> ContextualGaussianConfig {
    let mut cfg = ContextualGaussianConfig::paper();
    cfg.instantiate(20240917).unwrap();
    cfg
}

/// `RING` pre-drawn rounds: features, means, noise.
fn ring() -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let cfg = env_cfg();
    let mut env = cfg.build(20240917, 0).unwrap();
    let (mut f, mut m, mut e) = (vec![], vec![], vec![]);
    for t in 0..RING as u64 {
        env.next_round(t);
        f.extend_from_slice(env.actions().features);
        m.extend_from_slice(env.means());
        e.push(env.noise());
    }
    (f, m, e)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("contextual_d3_k10");
    let cfg = env_cfg();
    let mut env = cfg.build(20240917, 1).unwrap();
    let mut t = 0u64;
    g.bench_function("draw_contexts", |b| {
        b.iter(|| {
            env.next_round(t);
            t += 1;
            black_box(env.best_mean())
        })
    });
    let (f, m, e) = ring();
    let policies: [(&str, OfulConfig); 4] = [
        (
            "oful_step",
            OfulConfig::paper(OfulKind::Oful, f64::INFINITY),
        ),
        (
            "rs_oful_step",
            OfulConfig::paper(OfulKind::RsOful, f64::INFINITY),
        ),
        (
            "adac_oful_step_rho1",
            OfulConfig::paper(OfulKind::AdacOful, 1.0),
        ),
        (
            "adac_oful_step_rho0.1",
            OfulConfig::paper(OfulKind::AdacOful, 0.1),
        ),
    ];
    for (name, pc) in policies {
        let mut p: Box<dyn ContextualPolicy> = pc.build(3, 10_000_000, 5).unwrap();
        let mut t = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                let i = (t as usize) % RING;
                let acts = ActionSet {
                    d: 3,
                    k: 10,
                    features: &f[i * 30..(i + 1) * 30],
                };
                let a = p.choose(t, &acts);
                p.observe(&acts, a, m[i * 10 + a] + e[i]).unwrap();
                t += 1;
                black_box(a)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
