//! One module per subcommand. Each exposes its clap `Args` struct and a `run` function.

pub mod check;
pub mod completions;
pub mod doctor;
pub mod estimate;
pub mod lint;
pub mod measure;
pub mod plan;
pub mod schema;
pub mod serve;
