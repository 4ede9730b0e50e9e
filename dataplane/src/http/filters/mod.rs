//! Compiled HTTP filters: header modifiers, redirects, URL rewrites, CORS and request mirrors.

mod cors;
mod headers;
mod mirror;
mod path;
mod redirect;
mod rewrite;

pub use cors::Cors;
pub use headers::HeaderEdit;
pub use mirror::Mirror;
pub use path::PathRewrite;
pub use redirect::{Redirect, RedirectTarget};
pub use rewrite::Rewrite;

use http::{HeaderMap, HeaderValue};
use translator::ir;

use crate::error::ValidationError;
use crate::upstream::Upstreams;

/// One filter, validated and ready to apply.
#[derive(Debug)]
pub enum Filter {
    RequestHeaders(HeaderEdit),
    ResponseHeaders(HeaderEdit),
    Redirect(Redirect),
    Rewrite(Rewrite),
    Cors(Cors),
    Mirror(Mirror),
}

/// A change to the response, decided while the request was filtered.
#[derive(Debug)]
pub enum ResponseEdit<'a> {
    Headers(&'a HeaderEdit),
    /// CORS headers for an allowed origin.
    Cors(&'a Cors, HeaderValue),
    /// Headers an access check adds to the response.
    Append(HeaderMap),
}

impl ResponseEdit<'_> {
    pub fn apply(&self, headers: &mut HeaderMap) {
        match self {
            ResponseEdit::Headers(edit) => edit.apply(headers),
            ResponseEdit::Cors(cors, origin) => cors.apply(origin, headers),
            ResponseEdit::Append(added) => {
                for (name, value) in added {
                    headers.append(name, value.clone());
                }
            }
        }
    }
}

/// Where filters are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A rule's own filters: its `ExternalAuth` filters run in its access phase
    /// ([`crate::http::access`]), not here.
    Rule,
    /// A backendRef's filters.
    Backend,
}

/// Compiles the filters that apply to requests; `prefix` is the rule's `PathPrefix`, which
/// `ReplacePrefixMatch` replaces.
pub fn compile(
    filters: &[ir::Filter],
    placement: Placement,
    prefix: Option<&str>,
    context: &str,
    upstreams: &Upstreams,
) -> Result<Vec<Filter>, ValidationError> {
    let mut compiled = Vec::with_capacity(filters.len());
    for filter in filters {
        if placement == Placement::Rule && matches!(filter, ir::Filter::ExternalAuth(_)) {
            continue;
        }
        compiled.push(match filter {
            ir::Filter::RequestHeaderModifier(m) => Filter::RequestHeaders(HeaderEdit::compile(m, context)?),
            ir::Filter::ResponseHeaderModifier(m) => Filter::ResponseHeaders(HeaderEdit::compile(m, context)?),
            ir::Filter::RequestRedirect(r) => Filter::Redirect(Redirect::compile(r, prefix, context)?),
            ir::Filter::UrlRewrite(r) => Filter::Rewrite(Rewrite::compile(r, prefix, context)?),
            ir::Filter::Cors(c) => Filter::Cors(Cors::compile(c, context)?),
            ir::Filter::RequestMirror(m) => Filter::Mirror(Mirror::compile(m, context, upstreams)?),
            // Only a rule's access phase runs them; skipping one would let requests through
            // unchecked.
            ir::Filter::ExternalAuth(_) => {
                return Err(ValidationError::FilterPlacement {
                    context: context.to_string(),
                    filter: "ExternalAuth on a backendRef",
                });
            }
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
