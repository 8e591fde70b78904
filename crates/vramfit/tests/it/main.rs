//! The one integration-test binary: each module drives the real `vramfit` executable.

mod browser;
mod cli;
mod deepseek;
mod doctor;
mod estimate;
mod http;
mod lint;
mod measure;
mod model_toml;
mod parallel;
mod peft;
mod plan;
mod schema;
mod seq2seq;
mod serve;
mod task;
