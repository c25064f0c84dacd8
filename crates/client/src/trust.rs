//! Whom the client trusts with `--ca-cert FILE`. Every certificate in the file is a root added to
//! the platform's (a private CA: the server's chain ends at one of them), as before; and a server
//! whose own certificate is byte for byte one of them is trusted too (a self-signed server
//! certificate, as `curl --cacert` accepts it). The platform's verifier alone refuses that second
//! case: a self-signed certificate made by `openssl req -x509` says it is a CA, and a CA is not
//! accepted as a server's own certificate (`CaUsedAsEndEntity`).
//!
//! Pinned, the certificate is still checked where it can be: its validity period now and the
//! server name it was asked for. Its signature proves nothing more than the bytes already do.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

/// The TLS configuration of a client given `--ca-cert`: the platform's roots with the file's
/// certificates added, and the file's certificates pinned as server certificates.
pub(super) fn config(
    certs: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
) -> Result<rustls::ClientConfig, Error> {
    let roots = rustls_platform_verifier::Verifier::new_with_extra_roots(certs.clone(), provider.clone())?;
    let verifier = Pinned { pins: certs, roots: Arc::new(roots), provider: provider.clone() };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    // As reqwest sets it for a client that speaks both (HTTP/2 where the server offers it).
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[derive(Debug)]
struct Pinned {
    pins: Vec<CertificateDer<'static>>,
    /// The platform's verifier with the pins as extra roots: every other certificate.
    roots: Arc<dyn ServerCertVerifier>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if !self.pins.iter().any(|pin| pin.as_ref() == end_entity.as_ref()) {
            return self.roots.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        // The certificate as its own root: the path check looks at its validity period first, and
        // then finds it a CA (the one finding that pinning overrides) or accepts it.
        let mut itself = rustls::RootCertStore::empty();
        itself.add(end_entity.clone().into_owned())?;
        let algorithms = self.provider.signature_verification_algorithms.all;
        match rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &itself,
            &[],
            now,
            algorithms,
        ) {
            Ok(()) => {}
            Err(Error::InvalidCertificate(CertificateError::Other(e)))
                if e.to_string().contains("CaUsedAsEndEntity") => {}
            Err(e) => return Err(e),
        }
        rustls::client::verify_server_name(&parsed, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
