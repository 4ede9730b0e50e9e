//! Compiled HTTP filters: header modifiers, redirects and URL rewrites.
//!
//! Request mirrors and CORS are accepted in the IR but not applied by this dataplane yet.

mod headers;
mod path;
mod redirect;
mod rewrite;

pub use headers::HeaderEdit;
pub use path::PathRewrite;
pub use redirect::{Redirect, RedirectTarget};
pub use rewrite::Rewrite;

use translator::ir;

use crate::error::ValidationError;

/// One filter, validated and ready to apply.
#[derive(Debug)]
pub enum Filter {
    RequestHeaders(HeaderEdit),
    ResponseHeaders(HeaderEdit),
    Redirect(Redirect),
    Rewrite(Rewrite),
}

/// Compiles the filters that apply to requests; `prefix` is the rule's `PathPrefix`, which
/// `ReplacePrefixMatch` replaces.
pub fn compile(filters: &[ir::Filter], prefix: Option<&str>, context: &str) -> Result<Vec<Filter>, ValidationError> {
    let mut compiled = Vec::with_capacity(filters.len());
    for filter in filters {
        compiled.push(match filter {
            ir::Filter::RequestHeaderModifier(m) => Filter::RequestHeaders(HeaderEdit::compile(m, context)?),
            ir::Filter::ResponseHeaderModifier(m) => Filter::ResponseHeaders(HeaderEdit::compile(m, context)?),
            ir::Filter::RequestRedirect(r) => Filter::Redirect(Redirect::compile(r, prefix, context)?),
            ir::Filter::UrlRewrite(r) => Filter::Rewrite(Rewrite::compile(r, prefix, context)?),
            ir::Filter::RequestMirror(_) | ir::Filter::Cors(_) => continue,
        });
    }
    Ok(compiled)
}

/// Checks a hostname set by a redirect or rewrite.
fn checked_hostname(hostname: &str, context: &str) -> Result<String, ValidationError> {
    let valid = !hostname.is_empty()
        && hostname
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if valid {
        Ok(hostname.to_ascii_lowercase())
    } else {
        Err(ValidationError::FilterHostname {
            context: context.to_string(),
            hostname: hostname.to_string(),
        })
    }
}
