//! Response flags: why a request or session did not get the backend's answer whole.

/// One reason; its name is what the log shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Flag {
    /// No listener or rule matched (404).
    NoRoute = 1,
    /// The backend has no endpoint that may be sent to (503).
    NoHealthyEndpoint = 1 << 1,
    /// No endpoint accepted a connection (503).
    UpstreamConnectFailure = 1 << 2,
    /// The endpoint closed, reset or garbled the exchange before its response head (502).
    UpstreamError = 1 << 3,
    /// The response body from the endpoint failed after its head was sent.
    UpstreamReset = 1 << 4,
    /// The rule's `timeouts.request` elapsed (504).
    RequestTimeout = 1 << 5,
    /// The rule's `timeouts.backendRequest` elapsed for an attempt (504 unless retried).
    BackendTimeout = 1 << 6,
    /// The client stalled its request body (408).
    RequestBodyTimeout = 1 << 7,
    /// The last retry failed too.
    RetriesExhausted = 1 << 8,
    /// The client went away before the response was sent whole.
    DownstreamReset = 1 << 9,
    /// The rule's backendRef cannot be used, or its BackendTLSPolicy has no CA (500).
    InvalidBackend = 1 << 10,
    /// The request broke a listener limit (header size, for example).
    RequestRefused = 1 << 11,
    /// The request's host belongs to another listener than its connection's (421).
    Misdirected = 1 << 12,
    /// A TLS listener's client sent no ClientHello, or its handshake failed or took too long.
    TlsHandshakeFailure = 1 << 13,
    /// An access check (ExternalAuth) denied the request.
    AccessDenied = 1 << 14,
    /// An access check could not decide (its server unreachable, slow or confused): denied.
    AccessCheckFailed = 1 << 15,
    /// A route retry was not sent: the backend's retry budget is spent (503).
    RetryBudgetExhausted = 1 << 16,
    /// A security policy's address lists refused the client (403).
    ClientAddressDenied = 1 << 17,
    /// A security policy found no valid credentials: basic auth, API key or token (401).
    Unauthenticated = 1 << 18,
    /// A valid token's claims are not ones the security policy allows (403).
    Unauthorized = 1 << 19,
    /// The security policy protecting the rule cannot be enforced (500).
    SecurityPolicyInvalid = 1 << 20,
    /// A rate limit refused the request (429).
    RateLimited = 1 << 21,
    /// The rate limit service gave no decision and the policy refuses then (503).
    RateLimitServiceFailed = 1 << 22,
    /// The request body was larger than its rule allows (413).
    RequestBodyTooLarge = 1 << 23,
    /// The traffic policy of the rule cannot be applied (500).
    TrafficPolicyInvalid = 1 << 24,
    /// The backend's circuit breaker was open: too many requests, pending requests or retries
    /// in flight (503).
    UpstreamOverflow = 1 << 25,
}

impl Flag {
    const ALL: [Flag; 26] = [
        Flag::NoRoute,
        Flag::NoHealthyEndpoint,
        Flag::UpstreamConnectFailure,
        Flag::UpstreamError,
        Flag::UpstreamReset,
        Flag::RequestTimeout,
        Flag::BackendTimeout,
        Flag::RequestBodyTimeout,
        Flag::RetriesExhausted,
        Flag::DownstreamReset,
        Flag::InvalidBackend,
        Flag::RequestRefused,
        Flag::Misdirected,
        Flag::TlsHandshakeFailure,
        Flag::AccessDenied,
        Flag::AccessCheckFailed,
        Flag::RetryBudgetExhausted,
        Flag::ClientAddressDenied,
        Flag::Unauthenticated,
        Flag::Unauthorized,
        Flag::SecurityPolicyInvalid,
        Flag::RateLimited,
        Flag::RateLimitServiceFailed,
        Flag::RequestBodyTooLarge,
        Flag::TrafficPolicyInvalid,
        Flag::UpstreamOverflow,
    ];

    /// The name in log lines.
    pub fn name(self) -> &'static str {
        match self {
            Flag::NoRoute => "no_route",
            Flag::NoHealthyEndpoint => "no_healthy_endpoint",
            Flag::UpstreamConnectFailure => "upstream_connect_failure",
            Flag::UpstreamError => "upstream_error",
            Flag::UpstreamReset => "upstream_reset",
            Flag::RequestTimeout => "request_timeout",
            Flag::BackendTimeout => "backend_timeout",
            Flag::RequestBodyTimeout => "request_body_timeout",
            Flag::RetriesExhausted => "retries_exhausted",
            Flag::DownstreamReset => "downstream_reset",
            Flag::InvalidBackend => "invalid_backend",
            Flag::RequestRefused => "request_refused",
            Flag::Misdirected => "misdirected",
            Flag::TlsHandshakeFailure => "tls_handshake_failure",
            Flag::AccessDenied => "access_denied",
            Flag::AccessCheckFailed => "access_check_failed",
            Flag::RetryBudgetExhausted => "retry_budget_exhausted",
            Flag::ClientAddressDenied => "client_address_denied",
            Flag::Unauthenticated => "unauthenticated",
            Flag::Unauthorized => "unauthorized",
            Flag::SecurityPolicyInvalid => "security_policy_invalid",
            Flag::RateLimited => "rate_limited",
            Flag::RateLimitServiceFailed => "rate_limit_service_failed",
            Flag::RequestBodyTooLarge => "request_body_too_large",
            Flag::TrafficPolicyInvalid => "traffic_policy_invalid",
            Flag::UpstreamOverflow => "upstream_overflow",
        }
    }
}

/// A set of [`Flag`]s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags(pub u32);

impl Flags {
    pub fn insert(&mut self, flag: Flag) {
        self.0 |= flag as u32;
    }

    pub fn contains(self, flag: Flag) -> bool {
        self.0 & flag as u32 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags set, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Flag> {
        Flag::ALL.into_iter().filter(move |f| self.contains(*f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_has_its_own_bit_and_name() {
        let mut all = Flags::default();
        for flag in Flag::ALL {
            assert!(!all.contains(flag), "{flag:?} shares a bit");
            all.insert(flag);
        }
        let names: std::collections::BTreeSet<_> = all.iter().map(Flag::name).collect();
        assert_eq!(names.len(), Flag::ALL.len());
    }
}
