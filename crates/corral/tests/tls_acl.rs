//! TLS and ACL (placeholder during the first build).
