//! Integration tests of `vramfit lint`.
