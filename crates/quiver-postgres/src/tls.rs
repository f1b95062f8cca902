//! TLS to the server, as libpq's `sslmode` asks for it.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow` | only when a plain connection fails | as for `prefer` |
//! | `prefer` (the default) | when the server offers it; a failed handshake falls back to plain | checked against the root certificates when a root file exists, else not |
//! | `require` | always | as for `prefer` |
//! | `verify-ca` | always | signed by a root certificate |
//! | `verify-full` | always | signed by a root certificate and issued for the host name |
//!
//! The root certificates come from `sslrootcert` (or `PGSSLROOTCERT`), else
//! `~/.postgresql/root.crt`; `sslrootcert=system` takes the operating system's and makes
//! `verify-full` the default, a weaker mode being an error (libpq 16's rule). The system's store
//! is read once per process, when first found non-empty (reading it takes milliseconds, and a
//! connection string is parsed per query); a missing one is looked for again. A client
//! certificate comes from `sslcert` / `sslkey` (`PGSSLCERT` / `PGSSLKEY`), else
//! `~/.postgresql/postgresql.crt` and `postgresql.key` when present; as in libpq, the key file
//! may not be readable by group or others (a root-owned one by others). Unix sockets never use
//! TLS: libpq ignores `sslmode` there, and so does quiver. `sslnegotiation=direct` (PostgreSQL
//! 17) is passed to tokio-postgres, which supports it.
//!
//! The handshake is rustls's (with the ring provider), done under the tap: the TLS stream is
//! wrapped in [`TapStream`], so COPY data is still taken off in plaintext chunks.
//!
//! SCRAM logins over TLS bind the channel (`SCRAM-SHA-256-PLUS` with RFC 5929's
//! `tls-server-end-point`, the one binding Postgres offers) whenever the server offers it, and
//! `channel_binding` says whether that may be skipped (`prefer`, the default), must not be used
//! (`disable`) or is required (`require`: a login without it fails) — see
//! [`server_end_point`]. A server certificate signed with RSASSA-PSS or EdDSA has no binding
//! (Postgres cannot compute one either).
//!
//! Certificate revocation lists (PEM) come from `sslcrl` (`PGSSLCRL`) and every file in
//! `sslcrldir` (`PGSSLCRLDIR`), else `~/.postgresql/root.crl` when present. They are checked
//! whenever the server's certificate is (as libpq does, a mode that checks nothing ignores
//! them), with libpq's OpenSSL flags: every certificate of the chain below the root must be
//! covered by a list from its issuer, and an expired list is refused. Unlike libpq, which
//! silently skips a list file it cannot find, a named `sslcrl` or `sslcrldir` that does not
//! exist is an error: a typo must not turn the revocation check off.
//!
//! A client key encrypted as PKCS#8 (`-----BEGIN ENCRYPTED PRIVATE KEY-----`, what OpenSSL 3
//! writes: PBES2 with PBKDF2 or scrypt and AES-CBC) is decrypted with `sslpassword`; libpq would
//! prompt on the terminal without one, quiver says the password is missing. A key encrypted in
//! OpenSSL's older format (`Proc-Type: 4,ENCRYPTED`) is refused with the command that converts
//! it.
//! Cancel requests go in plain text, which the server accepts whatever `pg_hba.conf` says.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime,
};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::tls::{ChannelBinding, TlsConnect};

use crate::connection::Socket;
use crate::error::{PostgresError, Result};
use crate::options::option;
use crate::tap::TapStream;

/// The connection-string options this module reads (taken out before tokio-postgres parses the
/// string: it knows only three of the six modes, and none of the files).
pub const OPTIONS: [&str; 7] = [
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcrl",
    "sslcrldir",
];

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(PostgresError::InvalidDsn(format!(
                    "sslmode \"{text}\" is not one of disable, allow, prefer, require, \
                     verify-ca, verify-full"
                )))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// How a connection does TLS: the mode, and the rustls configuration unless it is `disable`.
#[derive(Clone)]
pub struct TlsSettings {
    pub mode: SslMode,
    config: Option<Arc<ClientConfig>>,
    /// The mode and the files the configuration was built from: settings with equal sources
    /// log in alike, so their connections may be shared.
    sources: String,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsSettings({})", self.mode.name())
    }
}

impl TlsSettings {
    /// The settings from the options taken out of a connection string, then the environment
    /// (`PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`, `PGSSLCRL`, `PGSSLCRLDIR`,
    /// `HOME`), then libpq's defaults.
    /// Certificate and key files are read here, so a bad one is reported before connecting.
    pub fn from_options(
        options: &[(String, String)],
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let setting = |name: &str, variable: &str| {
            option(options, name)
                .map(str::to_string)
                .or_else(|| env(variable))
                .filter(|value| !value.is_empty())
        };
        let root = setting("sslrootcert", "PGSSLROOTCERT");
        let system = root.as_deref() == Some("system");
        let mode = match setting("sslmode", "PGSSLMODE") {
            Some(text) => SslMode::parse(&text)?,
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if system && mode != SslMode::VerifyFull {
            return Err(PostgresError::InvalidDsn(format!(
                "weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")",
                mode.name()
            )));
        }
        if mode == SslMode::Disable {
            return Ok(TlsSettings {
                mode,
                config: None,
                sources: mode.name().to_string(),
            });
        }
        let home = env("HOME")
            .filter(|home| !home.is_empty())
            .map(PathBuf::from);
        let in_home = |file: &str| {
            home.as_ref()
                .map(|home| home.join(".postgresql").join(file))
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());

        let root = if system {
            None
        } else {
            root.map(PathBuf::from).or_else(|| in_home("root.crt"))
        };
        let cert = setting("sslcert", "PGSSLCERT")
            .map(PathBuf::from)
            .or_else(|| in_home("postgresql.crt"));
        let key = setting("sslkey", "PGSSLKEY")
            .map(PathBuf::from)
            .or_else(|| in_home("postgresql.key"));
        let crl_file = setting("sslcrl", "PGSSLCRL").map(PathBuf::from);
        let crl_dir = setting("sslcrldir", "PGSSLCRLDIR").map(PathBuf::from);
        // libpq's default list is used only when neither is named, and only if it exists.
        let default_crl = match (&crl_file, &crl_dir) {
            (None, None) => in_home("root.crl").filter(|path| path.exists()),
            _ => None,
        };
        let sources = format!(
            "{} {system} {root:?} {cert:?} {key:?} {crl_file:?} {crl_dir:?} {default_crl:?}",
            mode.name()
        );
        let roots = if system {
            Some(system_roots()?)
        } else {
            match root {
                Some(path) if path.exists() => Some(Arc::new(read_roots(&path)?)),
                Some(path) if mode.verifies() => {
                    return Err(tls_error(format!(
                        "root certificate file \"{}\" does not exist; either provide the file, \
                         use the system's trusted roots with sslrootcert=system, or change \
                         sslmode to disable server certificate verification",
                        path.display()
                    )))
                }
                None if mode.verifies() => {
                    return Err(tls_error(format!(
                        "sslmode={} needs root certificates: set sslrootcert (HOME is unset, so \
                         there is no ~/.postgresql/root.crt)",
                        mode.name()
                    )))
                }
                _ => None,
            }
        };
        let verifier: Arc<dyn ServerCertVerifier> = match roots {
            Some(roots) => {
                let crls = read_crls(crl_file.or(default_crl), crl_dir)?;
                let mut builder =
                    WebPkiServerVerifier::builder_with_provider(roots, provider.clone());
                if !crls.is_empty() {
                    builder = builder.with_crls(crls).enforce_revocation_expiration();
                }
                let webpki = builder.build().map_err(|e| {
                    tls_error(format!("root certificates or revocation lists: {e}"))
                })?;
                if mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(ChainOnly(webpki))
                }
            }
            None => Arc::new(AnyCertificate(provider.clone())),
        };

        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match cert.filter(|path| path.exists()) {
            Some(cert) => {
                let key = key.filter(|path| path.exists()).ok_or_else(|| {
                    tls_error(format!(
                        "certificate \"{}\" present, but no private key file (sslkey)",
                        cert.display()
                    ))
                })?;
                let chain = read_certificates(&cert, "client certificate")?;
                let key = read_key(&key, option(options, "sslpassword"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| tls_error(format!("client certificate: {e}")))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(TlsSettings {
            mode,
            config: Some(Arc::new(config)),
            sources,
        })
    }

    /// Whether connections made with `self` and with `other` log in alike.
    pub(crate) fn same_sources(&self, other: &TlsSettings) -> bool {
        self.sources == other.sources
    }

    /// The connector for a TCP connection to `host`.
    pub(crate) fn connector(&self, host: &str) -> Connector {
        Connector {
            config: self.config.clone(),
            host: host.to_string(),
        }
    }
}

fn tls_error(message: String) -> PostgresError {
    PostgresError::Tls(message)
}

fn read_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    read_pem(path, what, "certificate")
}

/// Every PEM object of type `T` in the file at `path` (`what` file, holding `kind`s): at least
/// one.
fn read_pem<T: PemObject>(path: &Path, what: &str, kind: &str) -> Result<Vec<T>> {
    let objects = T::pem_file_iter(path)
        .and_then(|objects| objects.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| tls_error(format!("{what} file \"{}\": {e}", path.display())))?;
    if objects.is_empty() {
        return Err(tls_error(format!(
            "{what} file \"{}\" holds no PEM {kind}",
            path.display()
        )));
    }
    Ok(objects)
}

fn read_roots(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(path, "root certificate")? {
        roots
            .add(certificate)
            .map_err(|e| tls_error(format!("root certificate file \"{}\": {e}", path.display())))?;
    }
    Ok(roots)
}

/// The revocation lists of `file` and of every file in `dir`: each file must exist and hold at
/// least one PEM list (a directory's other files, such as OpenSSL's hash links to the same
/// lists, are read too; a list read twice is harmless).
fn read_crls(
    file: Option<PathBuf>,
    dir: Option<PathBuf>,
) -> Result<Vec<CertificateRevocationListDer<'static>>> {
    let mut files = Vec::from_iter(file);
    if let Some(dir) = dir {
        let unreadable = |e: std::io::Error| {
            tls_error(format!(
                "revocation list directory \"{}\" (sslcrldir): {e}",
                dir.display()
            ))
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(unreadable)? {
            let path = entry.map_err(unreadable)?.path();
            if path.is_file() {
                found.push(path);
            }
        }
        found.sort();
        files.extend(found);
    }
    let mut crls = Vec::new();
    for path in files {
        crls.extend(read_pem(
            &path,
            "revocation list",
            "certificate revocation list",
        )?);
    }
    Ok(crls)
}

/// The operating system's trusted roots, read on the first call that finds some.
fn system_roots() -> Result<Arc<RootCertStore>> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    if let Some(roots) = ROOTS.get() {
        return Ok(Arc::clone(roots));
    }
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why = found
            .errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(tls_error(format!(
            "sslrootcert=system, but no trusted root certificate was found on this system{why}"
        )));
    }
    Ok(Arc::clone(ROOTS.get_or_init(|| Arc::new(roots))))
}

/// The private key at `path`, refused (as libpq refuses it) when group or others may read it;
/// a key owned by root may be readable by its group. An encrypted key is decrypted with
/// `password` (`sslpassword`).
fn read_key(path: &Path, password: Option<&str>) -> Result<PrivateKeyDer<'static>> {
    let bad = |why: &dyn std::fmt::Display| key_error(path, why);
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let metadata = std::fs::metadata(path).map_err(|e| bad(&e))?;
        let allowed = if metadata.uid() == 0 { 0o640 } else { 0o600 };
        if metadata.mode() & 0o777 & !allowed != 0 {
            return Err(bad(
                &"it has group or world access; it must be u=rw (0600) or less if owned by the \
                  current user, or u=rw,g=r (0640) or less if owned by root",
            ));
        }
    }
    let bytes = std::fs::read(path).map_err(|e| bad(&e))?;
    let text = String::from_utf8_lossy(&bytes);
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    if let Some(start) = text.find(BEGIN) {
        return decrypt_key(path, &text[start..], END, password);
    }
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(bad(
            &"it is encrypted in OpenSSL's legacy format, which quiver does not read; convert \
              it with `openssl pkcs8 -topk8 -v2 aes-256-cbc -in OLD -out NEW` and give its \
              password with sslpassword",
        ));
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| bad(&e))
}

/// An error about the private key file at `path`.
fn key_error(path: &Path, why: &dyn std::fmt::Display) -> PostgresError {
    tls_error(format!("private key file \"{}\": {why}", path.display()))
}

/// The key of the PEM block at the start of `block` (an encrypted PKCS#8 key, ending at
/// `end`), decrypted with `password`. No message names the password.
fn decrypt_key(
    path: &Path,
    block: &str,
    end: &str,
    password: Option<&str>,
) -> Result<PrivateKeyDer<'static>> {
    let bad = |why: String| key_error(path, &why);
    let Some(password) = password else {
        return Err(bad(
            "the key is encrypted; give its password with sslpassword".into(),
        ));
    };
    let block = match block.find(end) {
        Some(at) => &block[..at + end.len()],
        None => return Err(bad("the encrypted key's PEM block has no end line".into())),
    };
    let (_, der) = pkcs8::der::pem::decode_vec(block.as_bytes())
        .map_err(|e| bad(format!("the encrypted key's PEM block: {e}")))?;
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice())
        .map_err(|e| bad(format!("the encrypted key: {e}")))?;
    let key = info.decrypt(password).map_err(|e| {
        bad(format!(
            "could not decrypt the key ({e}): a wrong sslpassword, or a scheme other than \
             PBES2 with PBKDF2 or scrypt and AES-CBC"
        ))
    })?;
    Ok(PrivateKeyDer::Pkcs8(key.as_bytes().to_vec().into()))
}

/// Accepts any server certificate, but still checks that the server holds its key (the
/// handshake signatures): `prefer` and `require` without a root file.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Checks the certificate chain against the roots but not the name it was issued for
/// (`verify-ca`, and weaker modes when a root file exists).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        // webpki checks the name after the chain: a name error means the chain is good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A TLS connection to the server, with the tap above it.
pub type TlsSocket = Box<tokio_rustls::client::TlsStream<Socket>>;

/// A failed TLS handshake (what `prefer` falls back from).
#[derive(Debug, thiserror::Error)]
#[error("TLS handshake with {host} failed: {source}")]
pub struct HandshakeError {
    host: String,
    #[source]
    source: std::io::Error,
}

/// What tokio-postgres calls, after the server agreed to TLS, to wrap the socket: the tap is
/// taken off the plain socket and put back on top of the TLS stream.
#[derive(Debug)]
pub struct Connector {
    config: Option<Arc<ClientConfig>>,
    host: String,
}

impl TlsConnect<TapStream<Socket>> for Connector {
    type Stream = TapStream<TlsSocket>;
    type Error = HandshakeError;
    type Future =
        Pin<Box<dyn Future<Output = std::result::Result<Self::Stream, HandshakeError>> + Send>>;

    fn connect(self, stream: TapStream<Socket>) -> Self::Future {
        Box::pin(async move {
            let failed = |source: std::io::Error| HandshakeError {
                host: self.host.clone(),
                source,
            };
            let config = self
                .config
                .clone()
                .ok_or_else(|| failed(std::io::Error::other("TLS is disabled (sslmode)")))?;
            let name = ServerName::try_from(self.host.clone())
                .map_err(|e| failed(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
            let (socket, tap) = stream.into_parts();
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, socket)
                .await
                .map_err(failed)?;
            Ok(TapStream::new(Box::new(tls), tap))
        })
    }
}

impl tokio_postgres::tls::TlsStream for TapStream<TlsSocket> {
    fn channel_binding(&self) -> ChannelBinding {
        let (_, session) = self.get_ref().get_ref();
        match session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|certificate| server_end_point(certificate))
        {
            Some(hash) => ChannelBinding::tls_server_end_point(hash),
            None => ChannelBinding::none(),
        }
    }
}

/// RFC 5929's `tls-server-end-point` binding data: the server's certificate (DER) hashed with
/// the hash of the algorithm it is signed with — SHA-256 in place of MD5 and SHA-1 — as
/// Postgres computes it (`be_tls_get_certificate_hash`). `None` for a signature algorithm
/// without one such hash (RSASSA-PSS, EdDSA, anything unknown) or a certificate this cannot
/// read; the login then goes without channel binding.
pub fn server_end_point(certificate: &[u8]) -> Option<Vec<u8>> {
    const RSA: [u8; 8] = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01]; // 1.2.840.113549.1.1
    const ECDSA: [u8; 6] = [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04]; // 1.2.840.10045.4
    let oid = signature_algorithm(certificate)?;
    let hash = if let Some(rest) = oid.strip_prefix(&RSA[..]) {
        match rest {
            // md5WithRSAEncryption, sha1WithRSAEncryption
            [0x04] | [0x05] | [0x0b] => &ring::digest::SHA256,
            [0x0c] => &ring::digest::SHA384,
            [0x0d] => &ring::digest::SHA512,
            _ => return None,
        }
    } else if let Some(rest) = oid.strip_prefix(&ECDSA[..]) {
        match rest {
            // ecdsa-with-SHA1, ecdsa-with-SHA256
            [0x01] | [0x03, 0x02] => &ring::digest::SHA256,
            [0x03, 0x03] => &ring::digest::SHA384,
            [0x03, 0x04] => &ring::digest::SHA512,
            _ => return None,
        }
    } else {
        return None;
    };
    Some(ring::digest::digest(hash, certificate).as_ref().to_vec())
}

/// The object identifier (its DER contents) of a certificate's `signatureAlgorithm`:
/// `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE, signatureAlgorithm SEQUENCE { OID, … }, … }`.
fn signature_algorithm(certificate: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    let (body, _) = der_element(certificate, SEQUENCE)?;
    let (_tbs, rest) = der_element(body, SEQUENCE)?;
    let (algorithm, _) = der_element(rest, SEQUENCE)?;
    let (oid, _) = der_element(algorithm, OID)?;
    Some(oid)
}

/// The contents of the DER element with `tag` at the start of `input`, and what follows it;
/// `None` for another tag or a length that runs past the input.
fn der_element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = input.split_first()?;
    if found != tag {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let width = usize::from(first & 0x7f);
        if width == 0 || width > 4 || rest.len() < width {
            return None;
        }
        let (bytes, rest) = rest.split_at(width);
        let length = bytes
            .iter()
            .fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
        (length, rest)
    };
    (length <= rest.len()).then(|| rest.split_at(length))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element: `tag`, the length (long form above 127), `contents`.
    fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match contents.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n <= 0xff => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(contents);
        out
    }

    /// A certificate's outline: a to-be-signed part of `tbs_len` bytes, the algorithm, a
    /// signature.
    fn certificate(tbs_len: usize, oid: &[u8]) -> Vec<u8> {
        let mut algorithm = der(0x06, oid);
        algorithm.extend([0x05, 0x00]); // NULL parameters, as RSA has them
        let mut body = der(0x30, &vec![0x5a; tbs_len]);
        body.extend(der(0x30, &algorithm));
        body.extend(der(0x03, &[0x00, 0x12, 0x34]));
        der(0x30, &body)
    }

    #[test]
    fn the_end_point_hash_follows_the_signature_algorithm() {
        let rsa = |last: u8| [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, last];
        let ecdsa = |tail: &[u8]| [&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04][..], tail].concat();
        let cases: Vec<(Vec<u8>, Option<&ring::digest::Algorithm>)> = vec![
            (rsa(0x04).to_vec(), Some(&ring::digest::SHA256)), // MD5 → SHA-256
            (rsa(0x05).to_vec(), Some(&ring::digest::SHA256)), // SHA-1 → SHA-256
            (rsa(0x0b).to_vec(), Some(&ring::digest::SHA256)),
            (rsa(0x0c).to_vec(), Some(&ring::digest::SHA384)),
            (rsa(0x0d).to_vec(), Some(&ring::digest::SHA512)),
            (rsa(0x0a).to_vec(), None), // RSASSA-PSS
            (ecdsa(&[0x01]), Some(&ring::digest::SHA256)),
            (ecdsa(&[0x03, 0x02]), Some(&ring::digest::SHA256)),
            (ecdsa(&[0x03, 0x03]), Some(&ring::digest::SHA384)),
            (ecdsa(&[0x03, 0x04]), Some(&ring::digest::SHA512)),
            (vec![0x2b, 0x65, 0x70], None), // Ed25519
        ];
        // Short and long (one- and two-byte) lengths in the to-be-signed part.
        for tbs_len in [10, 200, 1500] {
            for (oid, hash) in &cases {
                let cert = certificate(tbs_len, oid);
                let expected = hash.map(|hash| ring::digest::digest(hash, &cert).as_ref().to_vec());
                assert_eq!(server_end_point(&cert), expected, "{oid:02x?} {tbs_len}");
            }
        }
    }

    #[test]
    fn a_certificate_that_cannot_be_read_has_no_end_point() {
        let good = certificate(300, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]);
        assert!(server_end_point(&good).is_some());
        // Every truncation runs a length past the end.
        for end in 0..good.len() {
            assert_eq!(server_end_point(&good[..end]), None, "cut at {end}");
        }
        let mut wrong_tag = good.clone();
        wrong_tag[0] = 0x31;
        assert_eq!(server_end_point(&wrong_tag), None);
        // A length of more than four bytes, and an indefinite length (not DER).
        assert_eq!(server_end_point(&[0x30, 0x85, 0, 0, 0, 0, 1, 0]), None);
        assert_eq!(server_end_point(&[0x30, 0x80, 0x30, 0x00]), None);
        assert_eq!(server_end_point(&[]), None);
    }

    fn settings(options: &[(&str, &str)], env: &[(&str, &str)]) -> Result<TlsSettings> {
        let options: Vec<(String, String)> = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TlsSettings::from_options(&options, &|name: &str| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn modes_come_from_the_string_then_the_environment() {
        let empty_home = tempfile::tempdir().unwrap();
        let home = empty_home.path().to_str().unwrap();
        assert_eq!(
            settings(&[], &[("HOME", home)]).unwrap().mode,
            SslMode::Prefer
        );
        let from_env = settings(&[], &[("HOME", home), ("PGSSLMODE", "require")]).unwrap();
        assert_eq!(from_env.mode, SslMode::Require);
        let both = settings(
            &[("sslmode", "disable")],
            &[("HOME", home), ("PGSSLMODE", "require")],
        )
        .unwrap();
        assert_eq!(both.mode, SslMode::Disable);
        assert!(both.config.is_none());
        let error = settings(&[("sslmode", "maybe")], &[])
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"maybe\" is not one of"), "{error}");
    }

    #[test]
    fn the_system_roots_are_read_once_found() {
        match (system_roots(), system_roots()) {
            (Ok(first), Ok(second)) => assert!(Arc::ptr_eq(&first, &second)),
            // A system without roots: each call looks again, and says so alike.
            (Err(first), Err(second)) => assert_eq!(first.to_string(), second.to_string()),
            (first, second) => panic!("{:?} then {:?}", first.is_ok(), second.is_ok()),
        }
    }

    #[test]
    fn verifying_modes_need_a_root_file_and_system_roots_need_verify_full() {
        let empty_home = tempfile::tempdir().unwrap();
        let home = empty_home.path().to_str().unwrap();
        let error = settings(&[("sslmode", "verify-ca")], &[("HOME", home)])
            .unwrap_err()
            .to_string();
        assert!(error.contains("root.crt\" does not exist"), "{error}");
        let error = settings(
            &[("sslmode", "require"), ("sslrootcert", "system")],
            &[("HOME", home)],
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("weak sslmode \"require\""), "{error}");
        // A root file named but missing is fine when nothing is verified.
        let lax = settings(
            &[
                ("sslmode", "require"),
                ("sslrootcert", "/nonexistent/root.crt"),
            ],
            &[],
        );
        assert!(lax.is_ok());
        let garbage = empty_home.path().join("garbage.crt");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let error = settings(
            &[
                ("sslmode", "verify-full"),
                ("sslrootcert", garbage.to_str().unwrap()),
            ],
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
    }
}
