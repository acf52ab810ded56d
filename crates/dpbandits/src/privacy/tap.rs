//! The release tap of the white-box auditor (`crate::audit::whitebox`): crate-internal.
//!
//! Every private release made through the crate's mechanisms ([`super::GaussianMechanism::release`],
//! [`super::LaplaceMechanism::release`], the deployment paths of [`super::NoiseSource`] and
//! [`super::RandomizedResponse::respond`]) calls [`record`]. When no tap is open on the current
//! thread (always, outside an audit) that is one thread-local read and nothing else. The auditor
//! opens a tap ([`open`]) around one run of a policy, tags the releases with the context it is in
//! ([`context`]: the arm whose rewards it is feeding, or the policy's decision step) and takes
//! them back ([`close`]). A run never leaves its thread, so parallel runs (rayon) do not mix.

use std::cell::RefCell;

/// The family of a release's noise (what the white-box estimator fits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Family {
    /// Gaussian (continuous or discrete): the Gaussian-DP `mu` of a location shift.
    Gaussian,
    /// Laplace (continuous or discrete): `epsilon` of a location shift.
    Laplace,
    /// A randomized-response bit (value 0 or 1).
    Bit,
}

/// One tapped release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Tapped {
    /// The context the auditor set when the release was made.
    pub context: u32,
    /// Position of the release among those of the same call (the auditor's context switch).
    pub position: u32,
    /// The noise family.
    pub family: Family,
    /// The released value.
    pub value: f64,
}

struct Tap {
    context: u32,
    position: u32,
    releases: Vec<Tapped>,
}

thread_local! {
    static TAP: RefCell<Option<Tap>> = const { RefCell::new(None) };
}

/// Record one release (a no-op unless a tap is open on this thread).
#[inline]
pub(crate) fn record(family: Family, value: f64) {
    TAP.with(|t| {
        if let Some(tap) = t.borrow_mut().as_mut() {
            let position = tap.position;
            tap.position += 1;
            tap.releases.push(Tapped {
                context: tap.context,
                position,
                family,
                value,
            });
        }
    });
}

/// Open a tap on this thread (discarding any previous one).
pub(crate) fn open() {
    TAP.with(|t| {
        *t.borrow_mut() = Some(Tap {
            context: 0,
            position: 0,
            releases: vec![],
        })
    });
}

/// Set the context of the following releases (and restart their positions).
pub(crate) fn context(c: u32) {
    TAP.with(|t| {
        if let Some(tap) = t.borrow_mut().as_mut() {
            tap.context = c;
            tap.position = 0;
        }
    });
}

/// Close the tap and return its releases in order.
pub(crate) fn close() -> Vec<Tapped> {
    TAP.with(|t| t.borrow_mut().take().map_or(vec![], |tap| tap.releases))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_while_open() {
        record(Family::Laplace, 1.0);
        open();
        context(3);
        record(Family::Laplace, 2.0);
        record(Family::Bit, 1.0);
        context(4);
        record(Family::Gaussian, 0.5);
        let r = close();
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].context, r[0].position, r[0].value), (3, 0, 2.0));
        assert_eq!((r[1].context, r[1].position), (3, 1));
        assert_eq!(
            (r[2].context, r[2].position, r[2].family),
            (4, 0, Family::Gaussian)
        );
        record(Family::Laplace, 1.0);
        assert!(close().is_empty());
    }
}
