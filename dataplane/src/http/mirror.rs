//! Sending request copies to mirror backends: fire and forget, bounded in body size and in
//! copies in flight.

use std::sync::Arc;

use http::request::Parts;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;

use crate::telemetry::AttemptSpan;
use crate::upstream::{BufferedBody, RequestBody, Upstream};

/// Copies in flight across the proxy; more are dropped.
pub const MAX_MIRRORS_IN_FLIGHT: usize = 256;

/// Sends `parts` with `body` to `upstream` in the background when a slot is free; `span`, the
/// copy's span when the request is traced, ends with the backend's answer.
pub fn send(
    slots: &Arc<Semaphore>,
    upstream: Arc<Upstream>,
    parts: Parts,
    body: BufferedBody,
    mut span: Option<AttemptSpan>,
) {
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        tracing::debug!(backend = %upstream.id, "mirror dropped: too many in flight");
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        match upstream.forward(Box::new(parts), RequestBody::Buffered(body), 0).await {
            Ok(forwarded) => {
                if let Some(span) = &mut span {
                    span.endpoint(upstream.endpoint_address(forwarded.endpoint));
                    span.answered(forwarded.response.status());
                }
                // Read the answer to the end so the connection returns to the pool.
                let _ = forwarded.response.into_body().collect().await;
            }
            Err(error) => {
                if let Some(span) = &mut span {
                    span.failed(error.flag().name());
                }
                tracing::debug!(%error, "mirror failed")
            }
        }
    });
}
