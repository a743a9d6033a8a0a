//! The upstream model server: its URL, checked once, and the protocol spoken to it.

use std::{path::Path, sync::Arc};

use http::uri::{Authority, Scheme, Uri};
use rustls::{
    pki_types::{pem::PemObject, CertificateDer},
    RootCertStore,
};
use serde::{Deserialize, Serialize};

/// The protocol spoken to the upstream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// HTTP/1.1 with a keep-alive pool.
    #[default]
    Http1,
    /// HTTP/2: cleartext (h2c, prior knowledge) for `http://`, ALPN `h2` for `https://`.
    Http2,
}

/// Where requests go: scheme and authority only, no path.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host:port` as written.
    pub authority: Authority,
    /// The protocol spoken to it.
    pub protocol: UpstreamProtocol,
    /// Certificates trusted for `https://` upstreams: the Mozilla (webpki)
    /// roots plus any from `upstream_ca_file`.
    pub roots: Arc<RootCertStore>,
}

/// Checks an authority's port, if it has one: the `http` crate keeps
/// whatever follows the `:`, and reads no port from what is not a number
/// up to 65535, so `:108856` (or `:8O00`) connected to port 80, the
/// scheme's default, with the requests' credentials.
pub(crate) fn port(authority: &Authority) -> Result<(), String> {
    // After the host (an IPv6 one is in brackets): `:` and the port.
    let text = authority.as_str();
    let after_host = text.rfind(']').map_or(text, |end| &text[end..]);
    let Some((_, port)) = after_host.rsplit_once(':') else {
        return Ok(());
    };
    match port.parse::<u16>() {
        Ok(1..) => Ok(()),
        _ => Err(format!("port `{port}` is not a number from 1 to 65535")),
    }
}

/// A URL as an error shows it: without its query or user info, which may
/// hold a key or a password.
pub(crate) fn shown(url: &str) -> String {
    let url = url.trim().split(['?', '#']).next().unwrap_or_default();
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("…@{host}"),
        None => authority.to_owned(),
    };
    match scheme {
        "" => format!("{authority}{path}"),
        scheme => format!("{scheme}://{authority}{path}"),
    }
}

impl Upstream {
    /// Parses `http://host:port` or `https://host[:port]`. A trailing `/` is
    /// accepted; any other path, a query or user info is refused, since
    /// tokenclock forwards the client's path unchanged.
    pub fn parse(raw: &str) -> Result<Self, String> {
        // What the errors show: not a query, nor user info, which may hold
        // a key (the error line goes to the log).
        let text = shown(raw);
        let uri: Uri = raw
            .trim()
            .parse()
            .map_err(|e| format!("invalid URL `{text}`: {e}"))?;
        let scheme = uri
            .scheme()
            .cloned()
            .ok_or_else(|| format!("`{text}` has no scheme: write http://host:port"))?;
        if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
            return Err(format!(
                "scheme `{scheme}` is not supported: use http or https"
            ));
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("`{text}` has no host"))?;
        if authority.as_str().contains('@') {
            return Err(
                "user info in the URL is not supported: send credentials as headers".into(),
            );
        }
        if authority.host().is_empty() {
            return Err(format!("`{text}` has no host"));
        }
        port(&authority).map_err(|e| format!("`{text}`: {e}"))?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(format!(
                "`{text}` has a path or query: give scheme://host:port only; request paths are forwarded as they come"
            ));
        }
        Ok(Self {
            scheme,
            authority,
            protocol: UpstreamProtocol::Http1,
            roots: Arc::new(webpki_roots()),
        })
    }

    /// The same upstream spoken to with `protocol`.
    pub(crate) fn with_protocol(self, protocol: UpstreamProtocol) -> Self {
        Self { protocol, ..self }
    }

    /// The same upstream, also trusting every certificate in the PEM file
    /// at `path` (a private CA for an internal model server).
    pub(crate) fn with_ca_file(self, path: &Path) -> Result<Self, String> {
        let mut roots = webpki_roots();
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut added = 0;
        for cert in certs {
            let cert = cert.map_err(|e| format!("{}: bad PEM: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: unusable certificate: {e}", path.display()))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!("{}: no certificates found", path.display()));
        }
        Ok(Self {
            roots: Arc::new(roots),
            ..self
        })
    }

    /// The port to connect to, with the scheme's default.
    pub fn port(&self) -> u16 {
        self.authority
            .port_u16()
            .unwrap_or(if self.scheme == Scheme::HTTPS {
                443
            } else {
                80
            })
    }

    /// The URL, for display.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }
}

fn webpki_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}
