//! Path modifiers shared by redirects and URL rewrites.

use translator::ir;

use crate::error::ValidationError;

/// A validated `ReplaceFullPath` or `ReplacePrefixMatch`.
#[derive(Debug, Clone)]
pub enum PathRewrite {
    Full(String),
    /// Replaces `matched` (the rule's prefix without trailing slash) with `replacement`.
    Prefix {
        matched: String,
        replacement: String,
    },
}

impl PathRewrite {
    pub fn compile(m: &ir::PathModifier, prefix: Option<&str>, context: &str) -> Result<Self, ValidationError> {
        let invalid = |path: &str| ValidationError::Path {
            context: context.to_string(),
            path: path.to_string(),
        };
        match m {
            ir::PathModifier::ReplaceFullPath(p) if p.starts_with('/') => Ok(PathRewrite::Full(p.clone())),
            ir::PathModifier::ReplaceFullPath(p) => Err(invalid(p)),
            ir::PathModifier::ReplacePrefixMatch(r) if !(r.is_empty() || r.starts_with('/')) => Err(invalid(r)),
            ir::PathModifier::ReplacePrefixMatch(r) => match prefix {
                Some(matched) => Ok(PathRewrite::Prefix {
                    matched: matched.trim_end_matches('/').to_string(),
                    replacement: r.clone(),
                }),
                None => Err(invalid(r)),
            },
        }
    }

    /// The new path for `path` (without query).
    pub fn apply(&self, path: &str) -> String {
        match self {
            PathRewrite::Full(p) => p.clone(),
            PathRewrite::Prefix { matched, replacement } => {
                let rest = path.strip_prefix(matched.as_str()).unwrap_or(path);
                if rest.is_empty() {
                    if replacement.is_empty() {
                        "/".to_string()
                    } else {
                        replacement.clone()
                    }
                } else {
                    format!("{}{rest}", replacement.trim_end_matches('/'))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(matched: &str, replacement: &str, path: &str) -> String {
        PathRewrite::Prefix {
            matched: matched.trim_end_matches('/').to_string(),
            replacement: replacement.to_string(),
        }
        .apply(path)
    }

    /// The table of the Gateway API's HTTPPathModifier documentation.
    #[test]
    fn replace_prefix_match_table() {
        let cases = [
            ("/foo", "/foo/bar", "/xyz", "/xyz/bar"),
            ("/foo", "/foo/bar", "/xyz/", "/xyz/bar"),
            ("/foo/", "/foo/bar", "/xyz", "/xyz/bar"),
            ("/foo/", "/foo/bar", "/xyz/", "/xyz/bar"),
            ("/foo", "/foo", "/xyz", "/xyz"),
            ("/foo", "/foo/", "/xyz", "/xyz/"),
            ("/foo/", "/foo/", "/xyz", "/xyz/"),
            ("/foo", "/foo", "/xyz/", "/xyz/"),
            ("/foo", "/foo/", "/xyz/", "/xyz/"),
            ("/foo/", "/foo/", "/xyz/", "/xyz/"),
            ("/foo", "/foo", "", "/"),
            ("/foo", "/foo/", "", "/"),
            ("/foo/", "/foo/", "", "/"),
            ("/foo", "/foo", "/", "/"),
            ("/foo", "/foo/", "/", "/"),
            ("/foo/", "/foo/", "/", "/"),
            ("/", "/foo", "/xyz", "/xyz/foo"),
        ];
        for (matched, path, replacement, expected) in cases {
            assert_eq!(
                prefix(matched, replacement, path),
                expected,
                "{matched} {path} {replacement}"
            );
        }
    }
}
