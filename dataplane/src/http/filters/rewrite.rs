//! `URLRewrite`: hostname and path of the request forwarded to the backend.

use http::HeaderValue;
use translator::ir;

use super::{PathRewrite, checked_hostname};
use crate::error::ValidationError;

/// A validated URL rewrite.
#[derive(Debug)]
pub struct Rewrite {
    pub hostname: Option<HeaderValue>,
    pub path: Option<PathRewrite>,
}

impl Rewrite {
    pub fn compile(r: &ir::UrlRewrite, prefix: Option<&str>, context: &str) -> Result<Self, ValidationError> {
        let hostname = match &r.hostname {
            Some(h) => {
                let h = checked_hostname(h, context)?;
                Some(HeaderValue::from_str(&h).map_err(|_| ValidationError::FilterHostname {
                    context: context.to_string(),
                    hostname: h.clone(),
                })?)
            }
            None => None,
        };
        Ok(Rewrite {
            hostname,
            path: r
                .path
                .as_ref()
                .map(|p| PathRewrite::compile(p, prefix, context))
                .transpose()?,
        })
    }
}
