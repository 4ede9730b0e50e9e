//! Request and response header modifiers: set replaces, add appends, remove deletes.

use http::{HeaderMap, HeaderName, HeaderValue};
use translator::ir;

use crate::error::ValidationError;

/// Validated header edits.
#[derive(Debug, Default)]
pub struct HeaderEdit {
    set: Vec<(HeaderName, HeaderValue)>,
    add: Vec<(HeaderName, HeaderValue)>,
    remove: Vec<HeaderName>,
}

impl HeaderEdit {
    pub fn compile(m: &ir::HeaderModifier, context: &str) -> Result<Self, ValidationError> {
        let pairs = |list: &[(ir::SmolStr, ir::SmolStr)]| {
            list.iter()
                .map(|(n, v)| Ok((name(n, context)?, value(n, v, context)?)))
                .collect::<Result<Vec<_>, ValidationError>>()
        };
        Ok(HeaderEdit {
            set: pairs(&m.set)?,
            add: pairs(&m.add)?,
            remove: m.remove.iter().map(|n| name(n, context)).collect::<Result<_, _>>()?,
        })
    }

    /// Applies set, then add, then remove, as the Gateway API orders them.
    pub fn apply(&self, headers: &mut HeaderMap) {
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &self.add {
            headers.append(name.clone(), value.clone());
        }
        for name in &self.remove {
            headers.remove(name);
        }
    }
}

fn name(name: &str, context: &str) -> Result<HeaderName, ValidationError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| ValidationError::HeaderName {
        context: context.to_string(),
        name: name.to_string(),
    })
}

fn value(name: &str, value: &str, context: &str) -> Result<HeaderValue, ValidationError> {
    HeaderValue::from_str(value).map_err(|_| ValidationError::HeaderValue {
        context: context.to_string(),
        name: name.to_string(),
    })
}
