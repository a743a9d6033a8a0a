//! The upstream model server: its URL, checked once, and the protocol spoken to it.

use http::uri::{Authority, Scheme, Uri};
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
}

impl Upstream {
    /// Parses `http://host:port` or `https://host[:port]`. A trailing `/` is
    /// accepted; any other path, a query or user info is refused, since
    /// tokenclock forwards the client's path unchanged.
    pub fn parse(text: &str) -> Result<Self, String> {
        let uri: Uri = text
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
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(format!(
                "`{text}` has a path or query: give scheme://host:port only; request paths are forwarded as they come"
            ));
        }
        Ok(Self {
            scheme,
            authority,
            protocol: UpstreamProtocol::Http1,
        })
    }

    /// The same upstream spoken to with `protocol`.
    pub fn with_protocol(self, protocol: UpstreamProtocol) -> Self {
        Self { protocol, ..self }
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
