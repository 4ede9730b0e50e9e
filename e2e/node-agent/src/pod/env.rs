//! A container's environment, resolved as the kubelet does: the apiserver's service variables,
//! then `envFrom`, then `env` (later entries win), with `$(VAR)` references to earlier variables
//! expanded; the same expansion applies to command and args.

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

use super::fieldref::{PodAddresses, field_value};
use super::sources::Sources;
use crate::error::{Error, Result};

/// The program search path of the containers (images would set their own).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where pods reach the apiserver (there is no kube-proxy, so no Service VIP).
#[derive(Debug, Clone)]
pub struct ApiserverEndpoint {
    pub host: String,
    pub port: u16,
}

/// Resolves the environment of `container`, in definition order.
pub async fn resolve(
    pod: &Pod,
    container: &Container,
    addrs: &PodAddresses,
    apiserver: &ApiserverEndpoint,
    sources: &mut Sources,
) -> Result<Vec<(String, String)>> {
    let mut env = Env::default();
    env.set("PATH", DEFAULT_PATH.to_string());
    env.set("HOSTNAME", pod.metadata.name.clone().unwrap_or_default());
    env.set("HOME", "/root".to_string());
    let (h, p) = (&apiserver.host, apiserver.port);
    env.set("KUBERNETES_SERVICE_HOST", h.clone());
    env.set("KUBERNETES_SERVICE_PORT", p.to_string());
    env.set("KUBERNETES_SERVICE_PORT_HTTPS", p.to_string());
    env.set("KUBERNETES_PORT", format!("tcp://{h}:{p}"));
    env.set("KUBERNETES_PORT_443_TCP", format!("tcp://{h}:{p}"));
    env.set("KUBERNETES_PORT_443_TCP_PROTO", "tcp".to_string());
    env.set("KUBERNETES_PORT_443_TCP_ADDR", h.clone());
    env.set("KUBERNETES_PORT_443_TCP_PORT", p.to_string());

    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (data, name, optional) = if let Some(r) = &from.config_map_ref {
            (sources.configmap(&r.name).await?, &r.name, r.optional)
        } else if let Some(r) = &from.secret_ref {
            (sources.secret(&r.name).await?, &r.name, r.optional)
        } else {
            continue;
        };
        match data {
            Some(d) => {
                for (k, v) in d {
                    env.set(&format!("{prefix}{k}"), String::from_utf8_lossy(v).into_owned());
                }
            }
            None if optional == Some(true) => {}
            None => return Err(Error::PodConfig(format!("envFrom: {name} not found"))),
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(v) = value_of(pod, var, addrs, sources, &env).await? {
            env.set(&var.name, v);
        }
    }
    Ok(env.vars)
}

/// Expands `$(NAME)` references to `vars`; `$$` is a literal `$`; unknown references stay as
/// they are (as in Kubernetes).
pub fn expand(s: &str, vars: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('(')
            && let Some(end) = r.find(')')
        {
            let name = &r[..end];
            match vars.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &r[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[derive(Default)]
struct Env {
    vars: Vec<(String, String)>,
}

impl Env {
    fn set(&mut self, name: &str, value: String) {
        match self.vars.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.vars.push((name.to_string(), value)),
        }
    }
}

async fn value_of(
    pod: &Pod,
    var: &EnvVar,
    addrs: &PodAddresses,
    sources: &mut Sources,
    env: &Env,
) -> Result<Option<String>> {
    let Some(from) = &var.value_from else {
        return Ok(Some(expand(var.value.as_deref().unwrap_or(""), &env.vars)));
    };
    if let Some(f) = &from.field_ref {
        return field_value(pod, &f.field_path, addrs).map(Some);
    }
    let (data, name, key, optional) = if let Some(r) = &from.secret_key_ref {
        (sources.secret(&r.name).await?, &r.name, &r.key, r.optional)
    } else if let Some(r) = &from.config_map_key_ref {
        (sources.configmap(&r.name).await?, &r.name, &r.key, r.optional)
    } else {
        return Err(Error::PodConfig(format!(
            "env {}: only value, fieldRef, secretKeyRef and configMapKeyRef are supported",
            var.name
        )));
    };
    match data.and_then(|d| d.get(key.as_str())) {
        Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
        None if optional == Some(true) => Ok(None),
        None => Err(Error::PodConfig(format!(
            "env {}: key {key} of {name} not found",
            var.name
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_kubernetes() {
        let vars = vec![("A".to_string(), "1".to_string()), ("B".to_string(), "x".to_string())];
        assert_eq!(expand("$(A)-$(B)", &vars), "1-x");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("$(C)", &vars), "$(C)");
        assert_eq!(expand("cost $5 $(A", &vars), "cost $5 $(A");
        assert_eq!(expand("plain", &vars), "plain");
    }
}
