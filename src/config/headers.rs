//! Request headers whose values the config may read into labels, request
//! ids and records: valid names, and none that carries a credential, whose
//! value would then be logged, written in records and exported in
//! `/metrics` (README, "Configuration": secrets stay out of all three).

use http::HeaderName;

use super::ConfigError;

/// Headers that carry a credential: an API key, a bearer token, a session
/// cookie (OpenAI's and Anthropic's keys, Azure OpenAI's `api-key` and its
/// API Management subscription key, Gemini's, AWS's session token).
const CREDENTIALS: [&str; 9] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "ocp-apim-subscription-key",
    "x-amz-security-token",
];

/// Words in a header's name that say it carries one: gateways name their
/// own (`x-litellm-api-key`, `x-portkey-api-key`, `helicone-auth`,
/// `cf-aig-authorization`, `x-auth-token`, `x-access-token`). Not `key`
/// alone: `idempotency-key` is a request id.
const CREDENTIAL_WORDS: [&str; 8] = [
    "auth",
    "api-key",
    "apikey",
    "token",
    "secret",
    "password",
    "credential",
    "cookie",
];

/// The header `name` at `key`, if its value may be read: one line naming
/// the key otherwise.
pub(super) fn readable(key: &str, name: &str) -> Result<HeaderName, ConfigError> {
    let header =
        HeaderName::from_bytes(name.as_bytes()).map_err(|e| ConfigError::invalid(key, e))?;
    let word = |w: &&str| header.as_str().contains(*w);
    if CREDENTIALS.contains(&header.as_str()) || CREDENTIAL_WORDS.iter().any(word) {
        let message = format!(
            "`{header}` carries a credential, which would be logged, recorded and \
             exported; name a header without one"
        );
        return Err(ConfigError::invalid(key, message));
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn a_header_that_carries_a_credential_is_refused() {
        for name in [
            "Authorization",
            "cookie",
            "X-Api-Key",
            "api-key",
            "x-goog-api-key",
        ] {
            let e = readable("labels[0].header", name)
                .err()
                .map(|e| e.to_string());
            let e = e.unwrap_or_default();
            assert!(e.starts_with("labels[0].header: "), "{name}: {e}");
            assert!(e.contains("credential"), "{name}: {e}");
        }
        for name in [
            "x-litellm-api-key",
            "helicone-auth",
            "x-auth-token",
            "x-access-token",
        ] {
            assert!(readable("k", name).is_err(), "{name}");
        }
        assert!(readable("k", "x-request-id").is_ok());
        assert!(readable("k", "idempotency-key").is_ok());
        assert!(readable("k", "x-tenant").is_ok());
        assert!(readable("k", "bad header").is_err());
    }
}
