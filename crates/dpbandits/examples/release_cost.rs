//! Cost per release of every noise family on both paths (issue 28, Done-when 5), timed as a
//! whole process: `release_cost FAMILY PATH N` makes `N` releases of `FAMILY` through
//! `privacy::NoiseSource` on `PATH` (`simulation`: seeded f64 noise; `deployment`: exact discrete
//! noise on an OS-keyed ChaCha20, rewards on the 2^-20 grid) and prints a checksum (so nothing is
//! optimised away). Divide the process's wall time by `N` (docs/perf.md, "Noise paths").
//!
//! Families (the calls the policies make):
//! * `gaussian`: `gaussian_mean`, the mean of L = 1024 rewards at rho = 1 (AdaC-UCB);
//! * `laplace`: `laplace_mean`, the same sum at epsilon = 1 (DP-SE, Lazy-DP-TS; DP-TT's
//!   `laplace_sum` is the same sampler and arithmetic);
//! * `local`: `local_bit` at epsilon = 1, reward 0.7 (randomized response: the Bernoulli and the
//!   keep coin; `kl_ucb_cf`, `sw_klucb_cf`, `ldp`);
//! * `gope`: `gaussian_linear`, a GOPE phase release: 10 blocks of 100 rewards, weights in R^3;
//! * `oful`: one AdaC-OFUL episode release in R^3 (simulation: the policy's three scalar
//!   `GaussianMechanism` draws; deployment: `gaussian_linear_sum` of an exact `LinearSum`);
//! * `oful_round`: one AdaC-OFUL round's contribution to the episode statistic (simulation: the
//!   float `r a`; deployment: additionally `LinearSum::push`).
//!
//! `cargo run --release -p dpbandits --example release_cost -- oful deployment 200000`

use dpbandits::privacy::{BoundaryMode, GaussianMechanism, NoiseSource, RewardBoundary};
use std::hint::black_box;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: release_cost gaussian|laplace|local|gope|oful|oful_round simulation|deployment N";
    if args.len() != 4 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let n: u64 = match args[3].replace('_', "").parse() {
        Ok(n) => n,
        Err(_) => {
            eprintln!("N = {:?}: expected a count\n{usage}", args[3]);
            std::process::exit(2);
        }
    };
    let mut src = match args[2].as_str() {
        "simulation" => NoiseSource::simulation(7),
        "deployment" => NoiseSource::deployment(20).expect("OS entropy"),
        p => {
            eprintln!("path = {p:?}: expected simulation or deployment\n{usage}");
            std::process::exit(2);
        }
    };
    let unit = RewardBoundary::unit(BoundaryMode::Clip);
    let sym = RewardBoundary::new(-1.0, 1.0, BoundaryMode::Clip).expect("[-1, 1]");
    let l = 1024u64;
    let sum = unit
        .sum_of((0..l).map(|i| if i < 700 { 1.0 } else { 0.0 }))
        .expect("rewards in [0, 1]");
    let mut check = 0.0f64;
    match args[1].as_str() {
        "gaussian" => {
            for _ in 0..n {
                check += src
                    .gaussian_mean(1.0 / l as f64, 1.0, &sum, &unit)
                    .expect("release")
                    .value();
            }
        }
        "laplace" => {
            for _ in 0..n {
                check += src
                    .laplace_mean(1.0 / l as f64, 1.0, &sum, &unit)
                    .expect("release")
                    .0;
            }
        }
        "local" => {
            for _ in 0..n {
                check += f64::from(u8::from(src.local_bit(1.0, 0.7).expect("coin")));
            }
        }
        "gope" => {
            let blocks: Vec<_> = (0..10)
                .map(|b| {
                    let w = vec![0.1 * b as f64, 0.5 - 0.03 * b as f64, 0.2];
                    (sym.repeated(0.25, 100).expect("reward"), w)
                })
                .collect();
            for _ in 0..n {
                check += src
                    .gaussian_linear(1.0, 2.0, &blocks, &sym)
                    .expect("release")
                    .0[0];
            }
        }
        "oful" => {
            let mech = GaussianMechanism::for_zcdp(2.0, 1.0).expect("rho = 1");
            let episode = [0.3, -0.2, 0.7];
            let mut acc = src.linear_sum(3, 1, 1.0, &sym);
            if let Some(acc) = acc.as_mut() {
                let r = sym.single(0.5).expect("reward");
                acc.push(&r, &[0.6, 0.0, 0.8], &sym).expect("push");
            }
            let mut rng = dpbandits::rng::noise_rng(7);
            for _ in 0..n {
                match &acc {
                    None => {
                        for e in episode {
                            check += mech.release(e, &mut rng);
                        }
                    }
                    Some(acc) => {
                        check += src
                            .gaussian_linear_sum(1.0, 2.0, acc, &sym)
                            .expect("release")
                            .0[0];
                    }
                }
            }
        }
        "oful_round" => {
            let mut acc = src.linear_sum(3, 1, 1.0, &sym);
            let mut episode = [0.0f64; 3];
            for i in 0..n {
                let a = [0.5, 0.1 * (i % 7) as f64, 0.3];
                let reward = 0.001 * (i % 1000) as f64 - 0.4;
                let norm = a.iter().map(|x| x * x).sum::<f64>().sqrt().max(1.0);
                let c = sym.clip(reward) / norm;
                for (e, x) in episode.iter_mut().zip(a) {
                    *e += c * x;
                }
                if let Some(acc) = acc.as_mut() {
                    let w = [a[0] / norm, a[1] / norm, a[2] / norm];
                    let r = sym.single(reward).expect("reward");
                    acc.push(&r, &w, &sym).expect("push");
                    if i % 4096 == 4095 {
                        acc.clear();
                    }
                }
            }
            check += episode.iter().sum::<f64>();
            black_box(&acc);
        }
        f => {
            eprintln!("family = {f:?}\n{usage}");
            std::process::exit(2);
        }
    }
    println!("{}", black_box(check));
}
