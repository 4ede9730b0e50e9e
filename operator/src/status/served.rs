//! Status follows the data path: in standalone mode the proxy runs in the operator's process, on
//! the same cores as the status writer and (often) the API server. A pass's status writes are
//! API requests the server answers with its own work (a write, a watch event back to every
//! watcher); at 5,000 routes the status pass of a new route began before the dataplane had
//! applied its IR in half the samples, competing with it. So the writer waits until the
//! dataplane serves the version the pass published, and a route's status then says what is
//! served, not what is about to be.

use std::time::Duration;

use tokio::sync::watch;

/// How long a pass's statuses wait at most for the dataplane: past it they are written anyway
/// (a dataplane still reading key material from a slow API server must not hold every status).
pub const WAIT: Duration = Duration::from_millis(500);

/// The newest published version (the push hub's counter) the in-process dataplane has applied or
/// rejected; a rejected IR is served no more than an accepted one is awaited.
#[derive(Clone, Debug)]
pub struct Served(watch::Receiver<u64>);

/// The dataplane's side: tells [`Served`] each version it is done with.
#[derive(Debug)]
pub struct Serving(watch::Sender<u64>);

/// A new pair, nothing served yet.
pub fn channel() -> (Serving, Served) {
    let (sender, receiver) = watch::channel(0);
    (Serving(sender), Served(receiver))
}

impl Serving {
    /// Version `version` and every one before it are applied (or were refused).
    pub fn done(&self, version: u64) {
        self.0.send_if_modified(|served| {
            let newer = version > *served;
            if newer {
                *served = version;
            }
            newer
        });
    }
}

impl Served {
    /// Completes when `version` is served, or after `wait`, or when the dataplane is gone;
    /// whether it was served.
    pub async fn caught_up(&self, version: u64, wait: Duration) -> bool {
        let mut receiver = self.0.clone();
        matches!(
            tokio::time::timeout(wait, receiver.wait_for(|served| *served >= version)).await,
            Ok(Ok(_))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn statuses_wait_for_the_version_they_published() {
        let (serving, served) = channel();
        assert!(
            served.caught_up(0, WAIT).await,
            "nothing published, nothing to wait for"
        );
        let waiting = tokio::spawn({
            let served = served.clone();
            async move {
                let started = tokio::time::Instant::now();
                (served.caught_up(3, WAIT).await, started.elapsed())
            }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        serving.done(2);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!waiting.is_finished(), "version 2 is not version 3");
        serving.done(4);
        let (caught_up, took) = waiting.await.expect("joins");
        assert!(caught_up);
        assert_eq!(took, Duration::from_millis(10));
        // An older version reported late does not go back.
        serving.done(1);
        assert!(served.caught_up(4, Duration::ZERO).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dataplane_that_never_catches_up_holds_statuses_only_so_long() {
        let (serving, served) = channel();
        let started = tokio::time::Instant::now();
        assert!(!served.caught_up(1, WAIT).await);
        assert_eq!(started.elapsed(), WAIT);
        drop(serving);
        let started = tokio::time::Instant::now();
        assert!(!served.caught_up(1, WAIT).await, "a dataplane gone serves nothing");
        assert!(started.elapsed() < WAIT, "and is not waited for");
    }
}
