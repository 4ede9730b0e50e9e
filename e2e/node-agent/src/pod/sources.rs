//! Secrets and ConfigMaps a pod refers to, fetched once per sync of the pod.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

use crate::error::Result;

/// Lazily fetched objects of one namespace; `None` records "not found".
pub struct Sources {
    secrets: Api<Secret>,
    configmaps: Api<ConfigMap>,
    secret_cache: HashMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    configmap_cache: HashMap<String, Option<BTreeMap<String, Vec<u8>>>>,
}

impl Sources {
    pub fn new(client: Client, namespace: &str) -> Self {
        Sources {
            secrets: Api::namespaced(client.clone(), namespace),
            configmaps: Api::namespaced(client, namespace),
            secret_cache: HashMap::new(),
            configmap_cache: HashMap::new(),
        }
    }

    /// The data of Secret `name`, or `None` when it does not exist.
    pub async fn secret(&mut self, name: &str) -> Result<Option<&BTreeMap<String, Vec<u8>>>> {
        if !self.secret_cache.contains_key(name) {
            let data = self.secrets.get_opt(name).await?.map(|s| {
                let mut d: BTreeMap<String, Vec<u8>> =
                    s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
                for (k, v) in s.string_data.unwrap_or_default() {
                    d.insert(k, v.into_bytes());
                }
                d
            });
            self.secret_cache.insert(name.to_string(), data);
        }
        Ok(self.secret_cache.get(name).and_then(Option::as_ref))
    }

    /// The data and binaryData of ConfigMap `name`, or `None` when it does not exist.
    pub async fn configmap(&mut self, name: &str) -> Result<Option<&BTreeMap<String, Vec<u8>>>> {
        if !self.configmap_cache.contains_key(name) {
            let data = self.configmaps.get_opt(name).await?.map(|c| {
                let mut d: BTreeMap<String, Vec<u8>> = c
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                for (k, v) in c.binary_data.unwrap_or_default() {
                    d.insert(k, v.0);
                }
                d
            });
            self.configmap_cache.insert(name.to_string(), data);
        }
        Ok(self.configmap_cache.get(name).and_then(Option::as_ref))
    }
}
