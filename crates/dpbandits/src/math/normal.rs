//! Standard normal draws for hot loops: `rand_distr`'s ziggurat ([`StandardNormal`]) with its
//! fast path inlined, the same numbers bit for bit.
//!
//! `StandardNormal` draws 64 bits, takes layer `i = bits & 0xff` and `u` in `[-1, 1)` from the
//! top 52 bits, and returns `x = u X[i]` when `|x| < X[i + 1]` (about 98.8% of draws); any other
//! draw goes through its wedge and tail tests, which draw more numbers. [`standard_normal`] does
//! the first step itself with the same table and, when the test fails, restores the generator
//! and hands the whole draw to `StandardNormal`, which then repeats the same first step and
//! goes on exactly as it would have. The table is `rand_distr`'s own, read out of it once per
//! process ([`ZigguratTable::get`]): for each layer `i`, a draw whose bits give `u =
//! -2^-10` passes the fast test (`X[i + 1] > 2^-10 X[i]`) and returns `-2^-10 X[i]` exactly;
//! layer 255's fast test always fails (`X[256] = 0`), and its wedge test accepts that point
//! with a uniform just below 1.
//! The table is then checked against `StandardNormal` on a fixed stream; if anything disagrees
//! (a future `rand_distr` with another algorithm), it is not used and every draw is
//! `StandardNormal`'s.

use crate::rng::{SimRng, SimRngWords};
use rand::{Rng, SeedableRng, TryRng};
use rand_distr::{Distribution, StandardNormal};
use std::convert::Infallible;
use std::sync::OnceLock;

/// `rand_distr`'s ziggurat layer boundaries for the standard normal (see the module docs).
#[derive(Debug)]
pub struct ZigguratTable {
    x: [f64; 257],
}

static TABLE: OnceLock<Option<ZigguratTable>> = OnceLock::new();

impl ZigguratTable {
    /// The table, read out of `rand_distr` and checked on first use (`None`: it did not
    /// check out; use [`StandardNormal`]).
    pub fn get() -> Option<&'static ZigguratTable> {
        TABLE.get_or_init(Self::probe).as_ref()
    }

    fn probe() -> Option<ZigguratTable> {
        /// A generator whose first word is `first` and whose later words vary (so that a
        /// rejection loop always ends); it counts the words drawn.
        struct Probe {
            first: u64,
            second: u64,
            calls: u64,
        }
        impl TryRng for Probe {
            type Error = Infallible;
            fn try_next_u32(&mut self) -> Result<u32, Infallible> {
                Ok((self.try_next_u64()? >> 32) as u32)
            }
            fn try_next_u64(&mut self) -> Result<u64, Infallible> {
                self.calls += 1;
                Ok(match self.calls {
                    1 => self.first,
                    2 => self.second,
                    n => n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                })
            }
            fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
                for b in dst {
                    *b = self.try_next_u64()? as u8;
                }
                Ok(())
            }
        }
        // The 52-bit fraction f with 2 (1 + f) - 3 = -2^-10.
        let fraction = (1u64 << 51) - (1u64 << 41);
        let mut x = [0.0f64; 257];
        for (i, slot) in x.iter_mut().enumerate().take(256) {
            let mut probe = Probe {
                first: (fraction << 12) | i as u64,
                calls: 0,
                second: u64::MAX,
            };
            let z: f64 = StandardNormal.sample(&mut probe);
            // Layer 255 has X[256] = 0: its fast test always fails, and the wedge test with a
            // uniform just below 1 accepts a point this close to 0 (one more word drawn).
            if probe.calls != 1 + u64::from(i == 255) {
                return None;
            }
            *slot = -z * 1024.0;
        }
        let table = ZigguratTable { x };
        // The same numbers as StandardNormal on a fixed stream (slow paths included).
        let mut b = SimRng::seed_from_u64(0x5eed);
        let mut a = SimRngWords::of(&b);
        for _ in 0..20_000 {
            let fast = standard_normal(&table, &mut a);
            let slow: f64 = StandardNormal.sample(&mut b);
            if fast.to_bits() != slow.to_bits() {
                return None;
            }
        }
        Some(table)
    }
}

/// One standard normal draw from `rng`, bit-identical to `StandardNormal.sample(rng)` (same
/// number, same generator state after), with the ziggurat's fast path inlined.
#[inline(always)]
pub fn standard_normal(table: &ZigguratTable, rng: &mut SimRngWords) -> f64 {
    let saved = *rng;
    let bits = rng.next_u64();
    let i = (bits & 0xff) as usize;
    // rand's `into_float_with_exponent(1)`: the top 52 bits as the fraction of [2, 4).
    let u = f64::from_bits((bits >> 12) | (1024u64 << 52)) - 3.0;
    let x = u * table.x[i];
    if x.abs() < table.x[i + 1] {
        return x;
    }
    let (x, after) = full_draw(saved);
    *rng = after;
    x
}

/// The whole draw by `StandardNormal` from state `rng` (the wedge and tail cases), and the
/// state after it. By value: no address of the caller's generator is taken, so it stays in
/// registers on the fast path.
#[cold]
#[inline(never)]
fn full_draw(mut rng: SimRngWords) -> (f64, SimRngWords) {
    let x = StandardNormal.sample(&mut rng);
    (x, rng)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inlined draw is `StandardNormal`'s, number for number and state for state, over a
    /// million draws (about 12 000 of them through the wedge and tail).
    #[test]
    fn same_draws_as_rand_distr() {
        let table = ZigguratTable::get().expect("the table reads out of rand_distr");
        assert!(table.x[0] > 3.7 && table.x[1] > 3.4 && table.x[255] > 0.2);
        assert_eq!(table.x[256], 0.0);
        let mut b = SimRng::seed_from_u64(42);
        let mut a = SimRngWords::of(&b);
        let mut slow = 0;
        for _ in 0..1_000_000 {
            let mut stepped = a;
            stepped.next_u64();
            let x = standard_normal(table, &mut a);
            let y: f64 = StandardNormal.sample(&mut b);
            assert_eq!(x.to_bits(), y.to_bits());
            slow += usize::from(a != stepped);
        }
        assert_eq!(a.to_rng(), b);
        assert_eq!(SimRngWords::of(&b), a);
        assert!(slow > 5_000, "{slow} draws took the full path");
    }

    /// The plain words step as `SimRng` does, for every way of drawing.
    #[test]
    fn words_are_the_generator() {
        use rand::RngExt;
        let mut b = SimRng::seed_from_u64(7);
        let mut a = SimRngWords::of(&b);
        for n in 0..1000usize {
            assert_eq!(a.next_u64(), b.next_u64());
            assert_eq!(a.next_u32(), b.next_u32());
            let (mut x, mut y) = (vec![0u8; n % 19], vec![0u8; n % 19]);
            a.fill_bytes(&mut x);
            b.fill_bytes(&mut y);
            assert_eq!(x, y);
            assert_eq!(a.random::<f64>().to_bits(), b.random::<f64>().to_bits());
        }
        assert_eq!(a.to_rng(), b);
    }
}
