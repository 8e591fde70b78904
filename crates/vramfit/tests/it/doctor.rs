//! Integration tests of `vramfit doctor`.
