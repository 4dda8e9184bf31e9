//! TLS to PostgreSQL with rustls, with libpq's `sslmode` semantics:
//!
//! - `disable`: no TLS; `prefer`: TLS when the server offers it, else plain;
//! - `require`: TLS, the certificate not checked (but checked as `verify-ca` when a root
//!   certificate is configured, as libpq does);
//! - `verify-ca`: the chain up to `sslrootcert`, not the host name; `verify-full`: both.
//!
//! Certificates are checked by webpki (rustls' own verifier); `verify-ca` accepts only its
//! "not valid for this name" answer, which webpki gives after the chain has been verified.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::conninfo::{RootCert, SslMode, SslOptions};

/// tokio-postgres' mode for libpq's, and the connector that checks the server as the mode says.
pub fn connector(o: &SslOptions) -> Result<(tokio_postgres::config::SslMode, MakeRustlsConnect), String> {
    use tokio_postgres::config::SslMode as Pg;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let roots = match &o.root {
        None => None,
        Some(r) => Some(Arc::new(root_store(r)?)),
    };
    // libpq: with a root certificate, require checks the chain as verify-ca.
    let check = match (o.mode, &roots) {
        (SslMode::VerifyFull, Some(r)) => Check::Full(webpki(r, &provider)?),
        (SslMode::VerifyCa | SslMode::Require, Some(r)) => Check::ChainOnly(webpki(r, &provider)?),
        _ => Check::Nothing(provider.clone()),
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(check));
    let config = match &o.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("sslcert {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!("sslcert {}: no certificate in the file", cert.display()));
            }
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("sslkey {}: {e}", key.display()))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| format!("sslcert/sslkey: {e}"))?
        }
    };
    let mode = match o.mode {
        SslMode::Disable => Pg::Disable,
        SslMode::Prefer => Pg::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Pg::Require,
    };
    Ok((mode, MakeRustlsConnect::new(config)))
}

fn root_store(r: &RootCert) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match r {
        RootCert::File(path) => {
            for cert in read_certs(path)? {
                store.add(cert).map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
        }
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
        }
    }
    if store.is_empty() {
        return Err("sslrootcert: no CA certificate found".into());
    }
    Ok(store)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("sslrootcert {}: {e}", path.display()))
}

fn webpki(roots: &Arc<RootCertStore>, provider: &Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>, String> {
    WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone()).build().map_err(|e| format!("sslrootcert: {e}"))
}

#[derive(Debug)]
enum Check {
    /// verify-full: the chain and the host name.
    Full(Arc<WebPkiServerVerifier>),
    /// verify-ca: the chain only.
    ChainOnly(Arc<WebPkiServerVerifier>),
    /// prefer/require without a root certificate: encryption without authentication of the server
    /// (the handshake's signatures are still checked against the certificate presented).
    Nothing(Arc<CryptoProvider>),
}

impl ServerCertVerifier for Check {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self {
            Check::Full(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
            Check::ChainOnly(v) => match v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
                Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => {
                    Ok(ServerCertVerified::assertion())
                }
                other => other,
            },
            Check::Nothing(_) => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(&self, m: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self {
            Check::Full(v) | Check::ChainOnly(v) => v.verify_tls12_signature(m, cert, dss),
            Check::Nothing(p) => verify_tls12_signature(m, cert, dss, &p.signature_verification_algorithms),
        }
    }

    fn verify_tls13_signature(&self, m: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self {
            Check::Full(v) | Check::ChainOnly(v) => v.verify_tls13_signature(m, cert, dss),
            Check::Nothing(p) => verify_tls13_signature(m, cert, dss, &p.signature_verification_algorithms),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        match self {
            Check::Full(v) | Check::ChainOnly(v) => v.supported_verify_schemes(),
            Check::Nothing(p) => p.signature_verification_algorithms.supported_schemes(),
        }
    }
}
