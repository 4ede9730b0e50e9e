//! Parsing of PEM certificate material into the facts the translation needs.
//!
//! Pure functions: the operator calls them when it caches a Secret or ConfigMap, local mode when
//! it reads files, so the snapshot never carries private keys.

use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use crate::snapshot::TlsFacts;

/// Facts of a `tls.crt`/`tls.key` pair.
pub fn tls_facts(crt: &[u8], key: &[u8]) -> TlsFacts {
    let blocks: Vec<Pem> = Pem::iter_from_buffer(crt).map_while(Result::ok).collect();
    let certs: Vec<_> = blocks.iter().filter(|p| p.label == "CERTIFICATE").collect();
    let mut dns_names = Vec::new();
    let mut certificate_valid = !certs.is_empty() && certs.len() == blocks.len();
    for (i, pem) in certs.iter().enumerate() {
        match pem.parse_x509() {
            Ok(cert) if i == 0 => {
                if let Ok(Some(san)) = cert.subject_alternative_name() {
                    for name in &san.value.general_names {
                        if let GeneralName::DNSName(dns) = name {
                            dns_names.push(dns.to_string());
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(_) => certificate_valid = false,
        }
    }
    let keys: Vec<Pem> = Pem::iter_from_buffer(key).map_while(Result::ok).collect();
    let private_key_valid = keys.len() == 1
        && matches!(
            keys[0].label.as_str(),
            "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY"
        )
        && !keys[0].contents.is_empty();
    TlsFacts {
        certificate_valid,
        private_key_valid,
        dns_names,
    }
}

/// Number of parseable X.509 certificates in a PEM bundle (0 when none or any is broken).
pub fn count_certificates(pem: &[u8]) -> usize {
    let mut count = 0;
    for block in Pem::iter_from_buffer(pem) {
        match block {
            Ok(p) if p.label == "CERTIFICATE" && p.parse_x509().is_ok() => count += 1,
            _ => return 0,
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let cert = rcgen::generate_simple_self_signed(names).expect("certificate");
        (cert.cert.pem(), cert.signing_key.serialize_pem())
    }

    #[test]
    fn valid_pair_with_dns_names() {
        let (crt, key) = pair(&["a.example.com", "*.example.com"]);
        let facts = tls_facts(crt.as_bytes(), key.as_bytes());
        assert!(facts.certificate_valid && facts.private_key_valid);
        assert_eq!(facts.dns_names, ["a.example.com", "*.example.com"]);
    }

    #[test]
    fn malformed_material_is_invalid() {
        let (crt, key) = pair(&["a.example.com"]);
        let broken = crt.replace("MII", "XXX");
        assert!(!tls_facts(broken.as_bytes(), key.as_bytes()).certificate_valid);
        assert!(!tls_facts(b"not a pem", key.as_bytes()).certificate_valid);
        assert!(!tls_facts(crt.as_bytes(), b"").private_key_valid);
        assert!(!tls_facts(crt.as_bytes(), crt.as_bytes()).private_key_valid);
    }

    #[test]
    fn counts_ca_bundles() {
        let (a, _) = pair(&["ca-a"]);
        let (b, _) = pair(&["ca-b"]);
        assert_eq!(count_certificates(format!("{a}{b}").as_bytes()), 2);
        assert_eq!(count_certificates(b""), 0);
        assert_eq!(count_certificates(b"garbage"), 0);
    }
}
