//! `RequestMirror`: which backend receives a copy of the request, and how often.

use std::sync::Arc;

use translator::ir;

use crate::error::ValidationError;
use crate::upstream::Upstreams;
use crate::upstream::{self, Upstream};

/// A validated mirror.
#[derive(Debug)]
pub struct Mirror {
    /// `None` for an invalid backendRef: nothing is mirrored.
    pub upstream: Option<Arc<Upstream>>,
    numerator: u32,
    denominator: u32,
}

impl Mirror {
    pub fn compile(m: &ir::Mirror, context: &str, upstreams: &Upstreams) -> Result<Self, ValidationError> {
        let upstream = upstream::find(upstreams, m.backend.as_deref(), context)?;
        Ok(Mirror {
            upstream,
            numerator: m.numerator,
            denominator: m.denominator,
        })
    }

    /// Samples whether this request is mirrored (once per request and mirror).
    pub fn sampled(&self) -> bool {
        self.upstream.is_some()
            && self.denominator > 0
            && (self.numerator >= self.denominator || fastrand::u32(0..self.denominator) < self.numerator)
    }
}
