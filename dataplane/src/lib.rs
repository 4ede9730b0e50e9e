//! Turna dataplane.
