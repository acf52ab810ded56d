//! Seeding: one master seed, named streams, a portable generator.
//!
//! Every random number in a simulation comes from a [`SimRng`] (`Xoshiro256PlusPlus`, a named
//! generator whose output is fixed by its specification, unlike `StdRng`). Child seeds are derived
//! from the master seed with [`derive_seed`], which mixes the master seed, a [`Stream`] tag and a path
//! of integers (cell, run, arm, ...) with SplitMix64. Consequences:
//!
//! * **Thread-count invariance.** A job's randomness depends only on its coordinates, never on the
//!   order in which jobs are scheduled.
//! * **Common random numbers.** Environment streams are keyed by (environment, run, arm) and not by
//!   the policy, so the k-th reward of arm `a` in run `r` is the same whichever policy asks for it
//!   (in step-by-step simulation). Private and non-private policies therefore face the same data.
//! * **Separate noise.** Privacy noise comes from its own [`Stream::Noise`], keyed by the policy's
//!   label, so a policy with `rho = inf` (no noise drawn) sees exactly the environment stream of
//!   its non-private counterpart (spec zcdp §8 T10), and adding a policy to an experiment does not
//!   change the streams of the others.

use rand::SeedableRng;

/// The simulation generator: Xoshiro256++ (Blackman & Vigna 2018), portable and reproducible.
pub type SimRng = rand_xoshiro::Xoshiro256PlusPlus;

/// Named random streams. The numeric tags are part of the reproducibility contract: changing
/// them changes every published curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Stream {
    /// Rewards of an environment (path: environment seed, arm).
    Env = 0x456e_7669_726f_6e00,
    /// A policy's own randomisation (tie-breaks, posterior samples, Bernoulli trick).
    Policy = 0x506f_6c69_6379_0000,
    /// Privacy noise of a mechanism.
    Noise = 0x4e6f_6973_6500_0000,
    /// Problem instances (random arm sets, theta*).
    Instance = 0x496e_7374_616e_6365,
    /// Public contexts of contextual bandits.
    Context = 0x436f_6e74_6578_7400,
}

/// SplitMix64 finaliser (Steele, Lea & Flood 2014), a bijective 64-bit mixer.
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Derive a child seed from `master`, a stream tag and a path of coordinates.
pub fn derive_seed(master: u64, stream: Stream, path: &[u64]) -> u64 {
    let mut s = splitmix64(master ^ splitmix64(stream as u64));
    for &p in path {
        s = splitmix64(s ^ splitmix64(p.wrapping_add(0x2545_F491_4F6C_DD1D)));
    }
    s
}

/// A generator for the given stream and path.
pub fn stream_rng(master: u64, stream: Stream, path: &[u64]) -> SimRng {
    SimRng::seed_from_u64(derive_seed(master, stream, path))
}

/// A stable 64-bit hash of a label (FNV-1a), used to key streams by a policy's label.
pub fn label_hash(label: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in label.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn streams_differ_and_are_stable() {
        let a = derive_seed(1, Stream::Env, &[0, 0]);
        let b = derive_seed(1, Stream::Noise, &[0, 0]);
        let c = derive_seed(1, Stream::Env, &[0, 1]);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, derive_seed(1, Stream::Env, &[0, 0]));
    }

    /// Value stability: the first outputs for a fixed seed are part of the reproducibility
    /// contract. A change here changes every published curve and must be noted in the CHANGELOG.
    #[test]
    fn value_stability() {
        let mut r = stream_rng(20240917, Stream::Env, &[0, 3]);
        let first = r.next_u64();
        let mut again = stream_rng(20240917, Stream::Env, &[0, 3]);
        assert_eq!(first, again.next_u64());
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(label_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(label_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
