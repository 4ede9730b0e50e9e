//! Certificate rotation and listener changes under TLS load: the certificate of one HTTPS
//! listener is replaced, and a third HTTPS listener is added and removed, round after round,
//! while HTTPS clients (kept-alive and new handshakes) use both HTTPS listeners and plain
//! clients the HTTP one. No handshake or request may fail on any of them; new handshakes on the
//! rotated listener must present the new certificate soon after the Secret changed.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use super::{Suite, plain_load, stage, until_served};
use crate::fixture;
use crate::load::{self, Mode, Target};
use crate::report::{Report, ms, quantile};

const ROUNDS: usize = 10;
/// New handshakes present the rotated certificate within this.
const ROTATION_LIMIT: Duration = Duration::from_secs(5);

/// A private CA that signs the listeners' certificates.
struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Authority {
    fn new() -> Result<Authority> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "turna reliability CA");
        let cert = params.self_signed(&key)?;
        Ok(Authority {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A kubernetes.io/tls Secret `name` for `host`, signed by this CA (a new key each time).
    fn secret(&self, ns: &str, name: &str, host: &str) -> Result<String> {
        let key = KeyPair::generate()?;
        let cert = CertificateParams::new(vec![host.to_string()])?.signed_by(&key, &self.issuer)?;
        let indent = |pem: &str| pem.lines().map(|l| format!("    {l}\n")).collect::<String>();
        Ok(format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(&cert.pem()),
            indent(&key.serialize_pem())
        ))
    }

    fn client(&self) -> Result<Arc<rustls::ClientConfig>> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(self.pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth(),
        ))
    }
}

fn listeners(extra: bool) -> String {
    let mut l = fixture::http_listener("http", 80);
    l.push_str(&fixture::https_listener("https-a", 443, "a.tls.example", "cert-a"));
    l.push_str(&fixture::https_listener("https-b", 8443, "b.tls.example", "cert-b"));
    if extra {
        l.push_str(&fixture::https_listener("https-c", 9443, "c.tls.example", "cert-c"));
    }
    l
}

fn tls_target(label: &str, address: IpAddr, port: u16, host: &str, tls: &Arc<rustls::ClientConfig>) -> Target {
    let mut t = fixture::target(label, address, port, host, "/");
    t.tls = Some(tls.clone());
    t
}

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    let ca = Authority::new()?;
    let tls = ca.client()?;
    stage(suite, ns).await?;
    for (secret, host) in [
        ("cert-a", "a.tls.example"),
        ("cert-b", "b.tls.example"),
        ("cert-c", "c.tls.example"),
    ] {
        c.apply(&ca.secret(ns, secret, host)?).await?;
    }
    c.apply(&fixture::gateway(ns, "gw", &listeners(false))).await?;
    for host in ["a.tls.example", "b.tls.example", "c.tls.example", "plain.example"] {
        let name = host.split('.').next().unwrap_or(host);
        c.apply(&fixture::http_route(
            ns,
            name,
            "gw",
            host,
            &fixture::rule_to("echo", 8080),
        ))
        .await?;
    }
    let address = c.gateway_address(ns, "gw").await?;
    let a = tls_target("HTTPS listener rotated", address, 443, "a.tls.example", &tls);
    let b = tls_target("HTTPS listener untouched", address, 8443, "b.tls.example", &tls);
    let plain = fixture::target("HTTP listener untouched", address, 80, "plain.example", "/");
    for t in [&a, &b, &plain] {
        until_served(t, Duration::from_secs(60), None, |x| x.service == "echo").await?;
    }

    let mut tls_plan = load::Plan::new(vec![a.clone(), b.clone()], &Mode::TLS);
    tls_plan.rate = suite.options.rate;
    tls_plan.workers = suite.options.workers;
    let tls_load = load::start(tls_plan);
    let plain_running = load::start(plain_load(suite, vec![plain.clone()]));
    let mut rotations = Vec::new();
    let mut added = Vec::new();
    let c_target = tls_target("HTTPS listener added", address, 9443, "c.tls.example", &tls);
    for round in 0..ROUNDS {
        // Rotate: a new key and certificate in the Secret of listener a.
        let before = load::once(&a, None).await.answer().and_then(|x| x.certificate);
        c.apply(&ca.secret(ns, "cert-a", "a.tls.example")?).await?;
        let started = Instant::now();
        until_served(&a, ROTATION_LIMIT * 4, None, |x| {
            x.certificate.is_some() && x.certificate != before
        })
        .await?;
        rotations.push(started.elapsed());
        // A listener added, served, and removed again.
        c.apply(&fixture::gateway(ns, "gw", &listeners(true))).await?;
        let started = Instant::now();
        until_served(&c_target, Duration::from_secs(60), None, |x| x.service == "echo").await?;
        added.push(started.elapsed());
        c.apply(&fixture::gateway(ns, "gw", &listeners(false))).await?;
        let started = Instant::now();
        while load::once(&c_target, None).await.ok() {
            if started.elapsed() > Duration::from_secs(60) {
                bail!("the removed listener still serves after 60 s (round {round})");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::info!(round, "certificate rotation round done");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tls_outcomes = tls_load.stop().await;
    let plain_outcomes = plain_running.stop().await;

    report.no_failures(&b.label, tls_outcomes.iter().filter(|o| o.target == 1));
    report.no_failures(&plain.label, &plain_outcomes);
    report.no_failures(&a.label, tls_outcomes.iter().filter(|o| o.target == 0));
    let certificates: std::collections::HashSet<u64> = tls_outcomes
        .iter()
        .filter(|o| o.target == 0)
        .filter_map(|o| o.answer()?.certificate)
        .collect();
    report.check(
        "certificates the load saw on the rotated listener",
        certificates.len().to_string(),
        format!(">= {}", ROUNDS + 1),
        certificates.len() > ROUNDS,
    );
    rotations.sort();
    let slowest = rotations.last().copied().unwrap_or_default();
    report.check(
        "Secret changed to new handshakes presenting it (median / max)",
        format!("{} / {}", ms(quantile(&rotations, 0.5)), ms(slowest)),
        format!("max <= {}", ms(ROTATION_LIMIT)),
        slowest <= ROTATION_LIMIT,
    );
    added.sort();
    report.measure(
        "listener added to first 200 on it (median / max)",
        format!(
            "{} / {}",
            ms(quantile(&added, 0.5)),
            ms(added.last().copied().unwrap_or_default())
        ),
    );
    Ok(())
}
