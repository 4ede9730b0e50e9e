//! Pods bound to this node: a watch on `spec.nodeName`, and one worker task per pod.

pub mod env;
pub mod fieldref;
pub mod network;
pub mod probe;
pub mod process;
pub mod sources;
pub mod status;
pub mod volume;
mod worker;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc;

use crate::config::AgentConfig;
use crate::images::ImageMap;
use env::ApiserverEndpoint;
use network::Ipam;

/// What every pod worker shares.
pub struct Shared {
    pub cfg: AgentConfig,
    pub client: Client,
    pub images: ImageMap,
    pub ipam: Mutex<Ipam>,
    /// This binary, started as `launch` for each container.
    pub exe: PathBuf,
    pub apiserver: ApiserverEndpoint,
}

/// News for a pod worker.
pub enum PodEvent {
    Update(Box<Pod>),
    /// The pod object is gone: stop at once.
    Gone,
}

/// Watches the pods bound to this node and runs one worker per pod uid; returns when the watch
/// stream ends (it retries with back-off on errors, so only on shutdown).
pub async fn run(shared: Arc<Shared>) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", shared.cfg.node_name));
    let mut stream = watcher(api, cfg).default_backoff().boxed();
    let mut workers: HashMap<String, mpsc::UnboundedSender<PodEvent>> = HashMap::new();
    let mut listed: Option<HashSet<String>> = None;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Init) => listed = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(pod)) => {
                if let (Some(l), Some(uid)) = (&mut listed, &pod.metadata.uid) {
                    l.insert(uid.clone());
                }
                dispatch(&shared, &mut workers, pod);
            }
            Ok(watcher::Event::InitDone) => {
                // After a re-list, pods we run that are no longer listed were deleted meanwhile.
                if let Some(l) = listed.take() {
                    workers.retain(|uid, tx| {
                        let keep = l.contains(uid);
                        if !keep {
                            let _ = tx.send(PodEvent::Gone);
                        }
                        keep
                    });
                }
            }
            Ok(watcher::Event::Apply(pod)) => dispatch(&shared, &mut workers, pod),
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(tx) = pod.metadata.uid.as_ref().and_then(|u| workers.remove(u)) {
                    let _ = tx.send(PodEvent::Gone);
                }
            }
            Err(e) => tracing::warn!(error = %e, "pod watch"),
        }
        workers.retain(|_, tx| !tx.is_closed());
    }
}

fn dispatch(shared: &Arc<Shared>, workers: &mut HashMap<String, mpsc::UnboundedSender<PodEvent>>, pod: Pod) {
    let Some(uid) = pod.metadata.uid.clone() else { return };
    if let Some(tx) = workers.get(&uid)
        && tx.send(PodEvent::Update(Box::new(pod.clone()))).is_ok()
    {
        return;
    }
    // A pod already deleted whose worker has finished needs nothing more.
    if workers.remove(&uid).is_some() && pod.metadata.deletion_timestamp.is_some() {
        return;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    workers.insert(uid, tx);
    let w = worker::PodWorker::new(shared.clone(), pod);
    tokio::spawn(w.run(rx));
}
