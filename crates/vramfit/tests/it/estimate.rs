//! Integration tests of `vramfit estimate`.
