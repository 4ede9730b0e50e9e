//! Label selectors (`matchLabels` and `matchExpressions`) over Namespace labels.

use std::collections::BTreeMap;

/// One `matchExpressions` entry.
pub struct Expression<'a> {
    pub key: &'a str,
    pub operator: &'a str,
    pub values: &'a [String],
}

/// Whether `labels` satisfy the selector. An unknown operator never matches.
pub fn matches(
    labels: &BTreeMap<String, String>,
    match_labels: Option<&BTreeMap<String, String>>,
    expressions: &[Expression<'_>],
) -> bool {
    let labels_ok = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && expressions.iter().all(|e| {
            let value = labels.get(e.key);
            match e.operator {
                "In" => value.is_some_and(|v| e.values.contains(v)),
                "NotIn" => value.is_none_or(|v| !e.values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}
