//! Link emulation and observation between two roles (ARCHITECTURE.md, "tap").
