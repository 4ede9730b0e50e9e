//! Outlier detection (TurnaBackendPolicy `healthCheck.outlierDetection`): an endpoint whose
//! answers fail in a row is ejected for a while, unless that would eject more than the policy's
//! share of the backend's endpoints.

use std::time::Duration;

use super::{Endpoint, Upstream};

impl Upstream {
    /// Records the status an endpoint answered.
    pub(super) fn answered(&self, endpoint: &Endpoint, status: u16) {
        let Some(outlier) = self.outlier() else {
            return;
        };
        if endpoint.health.answered(status, outlier) {
            self.eject_outlier(endpoint, "consecutive error answers");
        }
    }

    /// Records a request an endpoint gave no answer to.
    pub(super) fn unanswered(&self, endpoint: &Endpoint) {
        let Some(outlier) = self.outlier() else {
            return;
        };
        if endpoint.health.unanswered(outlier) {
            self.eject_outlier(endpoint, "consecutive gateway errors");
        }
    }

    fn outlier(&self) -> Option<&translator::ir::Outlier> {
        self.spec.traffic.health.as_ref()?.outlier.as_ref()
    }

    /// Ejects `endpoint` when the share of ejected endpoints allows (always at least one).
    fn eject_outlier(&self, endpoint: &Endpoint, why: &str) {
        let Some(outlier) = self.outlier() else {
            return;
        };
        if endpoint.health.ejected() {
            return;
        }
        let ejected = self.endpoints.iter().filter(|e| e.health.ejected()).count();
        let allowed = (self.endpoints.len() * outlier.max_ejection_percent as usize / 100).max(1);
        if ejected >= allowed {
            tracing::info!(backend = %self.id, endpoint = %endpoint.pool.authority(), ejected, allowed, "outlier not ejected: the most endpoints the policy lets out are out");
            return;
        }
        endpoint.health.eject(Duration::from_millis(outlier.ejection_ms));
        self.ejections.inc();
        tracing::warn!(backend = %self.id, endpoint = %endpoint.pool.authority(), ejection_ms = outlier.ejection_ms, "endpoint ejected as an outlier: {why}");
    }
}
