//! `usher-size`: a sale's deployment plan from the costs BENCHMARKS.md measures.
//!
//! - [`arrivals`]: the arrival curve, from a named shape or a CSV;
//! - [`figures`]: the measured costs, read out of BENCHMARKS.md row by row;
//! - [`plan`]: the line second by second and what holding it costs (pure functions);
//! - [`cli`]: the command line and how a plan is written.

pub mod arrivals;
pub mod cli;
pub mod figures;
pub mod plan;
