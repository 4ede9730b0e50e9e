//! The downward API: `fieldRef` paths of a pod, for env and for volume files.

use k8s_openapi::api::core::v1::Pod;

use crate::error::{Error, Result};

/// Addresses known once the sandbox exists.
#[derive(Debug, Clone)]
pub struct PodAddresses {
    pub pod_ip: String,
    pub host_ip: String,
}

/// The value of `fieldPath` for `pod`.
pub fn field_value(pod: &Pod, path: &str, addrs: &PodAddresses) -> Result<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let map_entry = |prefix: &str, map: Option<&std::collections::BTreeMap<String, String>>| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(|key| map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    if let Some(v) = map_entry("metadata.labels['", meta.labels.as_ref()) {
        return Ok(v);
    }
    if let Some(v) = map_entry("metadata.annotations['", meta.annotations.as_ref()) {
        return Ok(v);
    }
    let format_map = |m: Option<&std::collections::BTreeMap<String, String>>| {
        m.map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.podIP" | "status.podIPs" => addrs.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => addrs.host_ip.clone(),
        other => {
            return Err(Error::PodConfig(format!("fieldRef {other} is not supported")));
        }
    })
}
