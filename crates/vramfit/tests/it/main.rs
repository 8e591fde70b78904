//! The one integration-test binary: each module drives the real `vramfit` executable.

mod cli;
mod doctor;
mod estimate;
mod lint;
mod measure;
mod schema;
