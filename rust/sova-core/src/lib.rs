//! Sova's policy kernels: pure functions over slices, for one host or a thousand at once.
//!
//! Nothing here knows of Python; `sova-py` binds these functions to the private module
//! `sova.policy._core` and the typed facades in `sova.policy` call them once per control
//! period for every host (docs/design.md, "The compiled core").

pub mod allocate;
pub mod bandwidth;
pub mod coldspots;
pub mod hotness;
pub mod loads;
pub mod metering;
mod npf;
pub mod parallel;
pub mod rng;
pub mod sensing;
pub mod share;
pub mod stats;
pub mod sum;
pub mod tick;
pub mod verdicts;
pub mod vfsched;
pub mod waterfill;
