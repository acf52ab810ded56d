//! Per-round cost of the OFUL family against the dimension `d` (K = 10 actions a round, the
//! paper's Gaussian contexts at dimension d: mean 1/sqrt(d), variance 0.1): one `choose` +
//! `observe` on pre-drawn decision sets, for the fixed-size engine (`OfulPolicy<D>`, d <= 16)
//! and the dynamic engine (`OfulDyn`, any d <= 256). Each policy is first warmed up over 20,000
//! rounds (its episodes are then long: the measured rounds are the steady state, updates
//! included when they fall).
//!
//! Run: `cargo bench -p dpbandits --bench contextual_dim` (add `-- rs_oful` to filter).
//! Results (medians) in docs/perf.md, "Contextual cost per round against d".

use criterion::{Criterion, criterion_group, criterion_main};
use dpbandits::contextual::{
    ActionSet, ContextualEnvConfig, ContextualGaussianConfig, ContextualPolicy, OfulConfig,
    OfulDyn, OfulKind, OfulPolicy,
};
use std::hint::black_box;
use std::time::Duration;

const RING: usize = 2048;
const K: usize = 10;
const WARM: u64 = 20_000;

/// `RING` pre-drawn rounds of dimension `d`: features, means, noise.
fn ring(d: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut cfg = ContextualGaussianConfig::paper();
    cfg.d = d;
    cfg.k = K;
    cfg.mean = None;
    cfg.instantiate(20240917).unwrap();
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

fn step(
    p: &mut dyn ContextualPolicy,
    t: u64,
    d: usize,
    r: &(Vec<f64>, Vec<f64>, Vec<f64>),
) -> usize {
    let i = (t as usize) % RING;
    let acts = ActionSet {
        d,
        k: K,
        features: &r.0[i * K * d..(i + 1) * K * d],
    };
    let a = p.choose(t, &acts);
    p.observe(&acts, a, r.1[i * K + a] + r.2[i]).unwrap();
    a
}

fn fixed(cfg: &OfulConfig, d: usize) -> Option<Box<dyn ContextualPolicy>> {
    let c = cfg.clone();
    Some(match d {
        2 => Box::new(OfulPolicy::<2>::new(c, 10_000_000, 5).unwrap()),
        4 => Box::new(OfulPolicy::<4>::new(c, 10_000_000, 5).unwrap()),
        8 => Box::new(OfulPolicy::<8>::new(c, 10_000_000, 5).unwrap()),
        16 => Box::new(OfulPolicy::<16>::new(c, 10_000_000, 5).unwrap()),
        _ => return None,
    })
}

fn bench(c: &mut Criterion) {
    let kinds = [
        (
            "rs_oful",
            OfulConfig::paper(OfulKind::RsOful, f64::INFINITY),
        ),
        ("adac_oful_rho1", OfulConfig::paper(OfulKind::AdacOful, 1.0)),
        ("oful", OfulConfig::paper(OfulKind::Oful, f64::INFINITY)),
    ];
    for (name, cfg) in kinds {
        let mut g = c.benchmark_group(format!("contextual_dim_{name}"));
        g.sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for d in [2usize, 4, 8, 16, 32, 64, 128] {
            // Plain OFUL factorises V every round (O(d^3)): warm it up less at large d.
            let warm = if name == "oful" && d >= 32 {
                2_000
            } else {
                WARM
            };
            let r = ring(d);
            let mut engines: Vec<(&str, Box<dyn ContextualPolicy>)> = vec![(
                "dynamic",
                Box::new(OfulDyn::new(cfg.clone(), d, 10_000_000, 5).unwrap()),
            )];
            if let Some(p) = fixed(&cfg, d) {
                engines.push(("fixed", p));
            }
            for (engine, mut p) in engines {
                for t in 0..warm {
                    step(p.as_mut(), t, d, &r);
                }
                let mut t = warm;
                g.bench_function(format!("{engine}/d={d}"), |b| {
                    b.iter(|| {
                        let a = step(p.as_mut(), t, d, &r);
                        t += 1;
                        black_box(a)
                    })
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
