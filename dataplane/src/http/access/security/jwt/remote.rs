//! A JWK Set fetched over HTTP(S) through the proxy's own upstream code (pooled connections,
//! the backend's TLS), kept for its refresh period, then fetched again in the background while
//! the old set keeps verifying. A token naming a key id the set lacks fetches it again at once
//! (keys were rotated), at most every [`REFETCH_EVERY`]. A set that cannot be fetched keeps the
//! last good one; with none, tokens are refused.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Limited};

use super::KeySet;
use crate::upstream::{BufferedBody, RequestBody, Upstream};

/// The soonest a set is fetched again for an unknown key id.
const REFETCH_EVERY: Duration = Duration::from_secs(10);
/// The soonest a set that could not be fetched is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// The longest a request waits for a fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest JWK Set read.
const MAX_SET: usize = 1 << 20;

/// The keys of one remote JWK Set.
#[derive(Debug)]
pub struct RemoteKeys {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    upstream: Arc<Upstream>,
    host: String,
    path: String,
    refresh: Duration,
    /// The last set fetched, and when.
    set: ArcSwapOption<Fetched>,
    /// When the last fetch was started (success or not), and the last one for an unknown key.
    attempted: Mutex<(Option<Instant>, Option<Instant>)>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Fetched {
    keys: Arc<KeySet>,
    at: Instant,
}

impl RemoteKeys {
    pub fn new(upstream: Arc<Upstream>, host: &str, path: &str, refresh_s: u32) -> Self {
        RemoteKeys {
            inner: Arc::new(Inner {
                upstream,
                host: host.to_string(),
                path: path.to_string(),
                refresh: Duration::from_secs(u64::from(refresh_s.max(1))),
                set: ArcSwapOption::empty(),
                attempted: Mutex::new((None, None)),
                fetching: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.inner.upstream
    }

    /// The set in use, if one was fetched.
    pub fn current(&self) -> Option<Arc<KeySet>> {
        self.inner.set.load().as_ref().map(|f| f.keys.clone())
    }

    /// The keys to verify a token naming `kid` with: the current set, fetched first when there
    /// is none or it lacks `kid`; a stale set is refreshed in the background.
    pub async fn keys(&self, kid: Option<&str>, connect_retries: u32) -> Option<Arc<KeySet>> {
        let now = Instant::now();
        let current = self.inner.set.load_full();
        match &current {
            Some(f) if kid.is_none_or(|k| f.keys.has_kid(k)) => {
                if now.duration_since(f.at) >= self.inner.refresh {
                    let inner = self.inner.clone();
                    tokio::spawn(async move { inner.refresh(connect_retries, Why::Stale).await });
                }
                return Some(f.keys.clone());
            }
            _ => {}
        }
        // No set yet, or a key id it lacks: fetch now (unless one was just tried).
        let why = if current.is_some() {
            Why::UnknownKey
        } else {
            Why::Missing
        };
        let fetched = tokio::time::timeout(FETCH_TIMEOUT, self.inner.refresh(connect_retries, why)).await;
        if fetched.is_err() {
            tracing::warn!(backend = %self.inner.upstream.id, "fetching a JWK Set timed out");
        }
        self.current()
    }
}

/// Why a set is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Its refresh period passed.
    Stale,
    /// None was fetched yet (or every fetch failed): tried at most every [`RETRY_EVERY`].
    Missing,
    /// A token names a key it lacks: at most every [`REFETCH_EVERY`], so tokens with made-up
    /// key ids cannot make the proxy hammer the issuer.
    UnknownKey,
}

impl Inner {
    /// Fetches the set for `why`, unless another fetch is running or `why` was served lately.
    async fn refresh(&self, connect_retries: u32, why: Why) {
        let Ok(_one) = self.fetching.try_lock() else {
            // Another request is fetching: wait for it, then use what it got.
            let _ = self.fetching.lock().await;
            return;
        };
        {
            let Ok(mut attempted) = self.attempted.lock() else {
                return;
            };
            let (any, unknown) = &mut *attempted;
            let recent = |at: &Option<Instant>, spacing| at.is_some_and(|at: Instant| at.elapsed() < spacing);
            let skip = match why {
                Why::Stale => false,
                Why::Missing => recent(any, RETRY_EVERY),
                Why::UnknownKey => recent(unknown, REFETCH_EVERY),
            };
            if skip {
                return;
            }
            *any = Some(Instant::now());
            if why == Why::UnknownKey {
                *unknown = *any;
            }
        }
        match self.fetch(connect_retries).await {
            Ok(keys) => {
                // An unchanged set keeps its identity: tokens verified with it stay verified.
                let same = self.set.load().as_ref().is_some_and(|f| *f.keys == keys);
                let keys = match self.set.load().as_ref() {
                    Some(f) if same => f.keys.clone(),
                    _ => Arc::new(keys),
                };
                self.set.store(Some(Arc::new(Fetched {
                    keys,
                    at: Instant::now(),
                })));
            }
            Err(error) => {
                tracing::warn!(backend = %self.upstream.id, path = %self.path, %error, "cannot fetch the JWK Set; keeping the last one");
            }
        }
    }

    async fn fetch(&self, connect_retries: u32) -> Result<KeySet, String> {
        let mut ask = Request::new(RequestBody::Buffered(BufferedBody::default()));
        *ask.method_mut() = Method::GET;
        *ask.uri_mut() = self.path.parse().map_err(|e: http::uri::InvalidUri| e.to_string())?;
        let host = HeaderValue::from_str(&self.host).map_err(|e| e.to_string())?;
        ask.headers_mut().insert(header::HOST, host);
        ask.headers_mut()
            .insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let (parts, body) = ask.into_parts();
        let forwarded = self
            .upstream
            .forward(Box::new(parts), body, connect_retries)
            .await
            .map_err(|e| e.to_string())?;
        let status = forwarded.response.status();
        let (_, body) = forwarded.response.into_parts();
        let body: Bytes = Limited::new(body, MAX_SET)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        drop(forwarded.guard);
        drop(forwarded.checkin);
        if status != StatusCode::OK {
            return Err(format!("the server answered {status}"));
        }
        KeySet::parse(&body)
    }
}
