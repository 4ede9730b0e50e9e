//! Who may reference what across namespaces.
//!
//! A reference from one namespace to an object in another needs a ReferenceGrant in the target
//! namespace whose `from` names the referrer's group, kind and namespace and whose `to` names the
//! target's group and kind (and name, when set). Same-namespace references need none.

use std::sync::Arc;

use crate::api::ReferenceGrant;

/// The referring side of a reference.
#[derive(Clone, Copy, Debug)]
pub struct From<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
}

/// The referenced side of a reference.
#[derive(Clone, Copy, Debug)]
pub struct To<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// Whether `from` may reference `to` under `grants`.
pub fn permits(grants: &[Arc<ReferenceGrant>], from: From<'_>, to: To<'_>) -> bool {
    if from.namespace == to.namespace {
        return true;
    }
    grants.iter().any(|grant| {
        grant.metadata.namespace.as_deref() == Some(to.namespace)
            && grant
                .spec
                .from
                .iter()
                .any(|f| f.group == from.group && f.kind == from.kind && f.namespace == from.namespace)
            && grant
                .spec
                .to
                .iter()
                .any(|t| t.group == to.group && t.kind == to.kind && t.name.as_deref().is_none_or(|n| n == to.name))
    })
}
