//! Leader election with a `coordination.k8s.io/v1` Lease (`status.leader_election`).
//!
//! Only the leader writes status and provisions; standbys keep watching so they can take over
//! with a warm cache. The algorithm is client-go's: a standby takes the Lease once its record has
//! not changed for a lease duration *as observed on the standby's own clock* (no clock skew
//! between pods matters), and every write carries the `resourceVersion` it read, so two standbys
//! racing for an expired Lease cannot both win. The leader stops acting as leader a renew deadline
//! after its last successful renewal, before any standby may take over, and releases the Lease on
//! shutdown so a standby takes over at its next retry.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::metrics::Metrics;
use crate::settings::Kubernetes;
use crate::watch::Changes;

/// How long a Lease is valid, when a leader gives up, and how often everyone retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `leaseDurationSeconds` written into the Lease: standbys wait this long after the last
    /// change they observed.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops acting as leader (shorter than
    /// `lease_duration`, so it stops before a standby can start).
    pub renew_deadline: Duration,
    /// Pause between renewals (leader) and acquisition attempts (standbys).
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(5),
        }
    }
}

/// Whether this instance may act as leader; cheap to clone and to ask.
#[derive(Clone, Debug)]
pub struct Leadership(Arc<State>);

#[derive(Debug)]
struct State {
    always: bool,
    /// Nanoseconds after [`epoch`] until which leadership holds; 0 when not leader.
    valid_until: AtomicU64,
    leading: AtomicBool,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos_since_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

impl Leadership {
    /// Leader election disabled (`status.leader_election.disabled`): always leader.
    pub fn always() -> Leadership {
        Leadership(Arc::new(State {
            always: true,
            valid_until: AtomicU64::new(0),
            leading: AtomicBool::new(true),
        }))
    }

    fn elected() -> Leadership {
        // Fix the epoch before any deadline is computed from it.
        let _ = epoch();
        Leadership(Arc::new(State {
            always: false,
            valid_until: AtomicU64::new(0),
            leading: AtomicBool::new(false),
        }))
    }

    /// Whether this instance holds a valid lease now (true when election is disabled).
    pub fn is_leader(&self) -> bool {
        self.0.always || nanos_since_epoch(Instant::now()) < self.0.valid_until.load(Ordering::Acquire)
    }

    fn hold_until(&self, until: Instant) {
        self.0
            .valid_until
            .store(nanos_since_epoch(until).max(1), Ordering::Release);
    }

    fn drop_leadership(&self) {
        self.0.valid_until.store(0, Ordering::Release);
    }
}

/// This instance's holder identity: `POD_NAME`, or the host name and process id.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "turna".into());
    format!("{host}_{}", std::process::id())
}

/// The Lease's namespace: `status.leader_election.namespace`, else the pod's (`POD_NAMESPACE`),
/// else the client's default namespace.
pub fn lease_namespace(settings: &Kubernetes, client: &Client) -> String {
    let configured = &settings.status.leader_election.namespace;
    if !configured.is_empty() {
        return configured.clone();
    }
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_string())
}

/// Competes for one Lease and keeps [`Leadership`] up to date.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    leadership: Leadership,
    changes: Changes,
    metrics: Arc<Metrics>,
}

/// The Lease record as last seen, and when this instance saw it change.
struct Observed {
    resource_version: Option<String>,
    at: Instant,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

impl Elector {
    /// An elector for the Lease `namespace/name`; `changes` is notified on becoming leader so the
    /// new leader reconciles at once.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: String,
        timing: Timing,
        changes: Changes,
        metrics: Arc<Metrics>,
    ) -> Elector {
        metrics.set_leader(false);
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity,
            timing,
            leadership: Leadership::elected(),
            changes,
            metrics,
        }
    }

    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// Campaigns and renews until `shutdown` completes, then releases the Lease if held.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut observed: Option<Observed> = None;
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
            wait = self.timing.retry_period;
            let attempted = Instant::now();
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(true) => {
                    self.leadership.hold_until(attempted + self.timing.renew_deadline);
                    self.set_leading(true);
                }
                Ok(false) => {
                    self.leadership.drop_leadership();
                    self.set_leading(false);
                }
                Err(error) => {
                    // Leadership lapses by itself at the renew deadline; only report it.
                    tracing::warn!(lease = %self.name, %error, "leader election request failed; retrying");
                    if !self.leadership.is_leader() {
                        self.set_leading(false);
                    }
                }
            }
        }
        let was_leader = self.leadership.is_leader();
        self.leadership.drop_leadership();
        self.set_leading(false);
        if was_leader {
            match self.release().await {
                Ok(()) => tracing::info!(lease = %self.name, identity = %self.identity, "leader lease released"),
                Err(error) => tracing::warn!(lease = %self.name, %error, "releasing the leader lease failed"),
            }
        }
    }

    fn set_leading(&self, leading: bool) {
        if self.leadership.0.leading.swap(leading, Ordering::AcqRel) == leading {
            return;
        }
        self.metrics.set_leader(leading);
        if leading {
            tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
            self.changes.notify();
        } else {
            tracing::info!(lease = %self.name, identity = %self.identity, "no longer leader");
        }
    }

    /// One attempt: `Ok(true)` when this instance holds the Lease afterwards.
    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds(self.timing.lease_duration)),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return conflict_is_no(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let mine = holder == Some(self.identity.as_str());
        let resource_version = lease.metadata.resource_version.clone();
        let changed = observed.as_ref().is_none_or(|o| o.resource_version != resource_version);
        if changed {
            *observed = Some(Observed {
                resource_version,
                at: Instant::now(),
            });
        }
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.timing.lease_duration, Duration::from_secs);
        let expired = observed.as_ref().is_some_and(|o| o.at.elapsed() >= duration);
        if holder.is_some() && !mine && !expired {
            return Ok(false);
        }
        if !mine {
            tracing::info!(lease = %self.name, previous = holder, "taking over the leader lease");
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds(self.timing.lease_duration)),
            acquire_time: if mine { spec.acquire_time.clone() } else { Some(now()) },
            renew_time: Some(now()),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(!mine)),
            ..spec
        });
        // `lease` carries the resourceVersion just read: a concurrent writer makes this a 409.
        conflict_is_no(self.api.replace(&self.name, &PostParams::default(), &lease).await)
    }

    /// Gives the Lease up so a standby takes over at its next retry instead of after expiry.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        conflict_is_no(self.api.replace(&self.name, &PostParams::default(), &lease).await).map(|_| ())
    }
}

/// A 409 (someone else wrote first) means "not ours", not a failure.
fn conflict_is_no(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_election_is_always_leader() {
        assert!(Leadership::always().is_leader());
    }

    #[test]
    fn leadership_lapses_at_its_deadline() {
        let l = Leadership::elected();
        assert!(!l.is_leader());
        l.hold_until(Instant::now() + Duration::from_secs(10));
        assert!(l.is_leader());
        l.hold_until(Instant::now() - Duration::from_millis(1));
        assert!(!l.is_leader());
        l.hold_until(Instant::now() + Duration::from_secs(10));
        l.drop_leadership();
        assert!(!l.is_leader());
    }

    #[test]
    fn renew_deadline_ends_before_the_lease() {
        let t = Timing::default();
        assert!(t.renew_deadline < t.lease_duration);
        assert!(t.retry_period < t.renew_deadline);
    }
}
