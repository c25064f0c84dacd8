//! Every secret bench knows (API keys, `{env:NAME}` values of presets, passwords in URLs) is
//! registered here the moment it is read, and `redact` removes them from anything bench writes or
//! prints: records, run.json, error messages, progress lines. A server that echoes a key back in an
//! error body must not get it onto disk.

use std::sync::{Mutex, OnceLock};

/// Shown in place of a secret.
pub const MASK: &str = "[redacted]";

/// Secrets shorter than this are not registered: masking every "a" in a message would destroy it,
/// and a 1-3 character secret is no secret.
const MIN_SECRET_CHARS: usize = 4;

fn registry() -> &'static Mutex<Vec<String>> {
    static SECRETS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    SECRETS.get_or_init(|| Mutex::new(Vec::new()))
}

/// Remembers `secret` so that `redact` masks it from now on.
pub fn register(secret: &str) {
    if secret.chars().count() < MIN_SECRET_CHARS {
        return;
    }
    let mut known = registry().lock().unwrap_or_else(|p| p.into_inner());
    if !known.iter().any(|s| s == secret) {
        known.push(secret.to_string());
        // Longest first, so a secret that contains another is masked whole.
        known.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with every registered secret replaced by `MASK`.
pub fn redact(text: &str) -> String {
    let known = registry().lock().unwrap_or_else(|p| p.into_inner());
    let mut out = text.to_string();
    for secret in known.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MASK);
        }
    }
    out
}

/// `url` with its password (and user) removed: `http://user:pass@host/` -> `http://[redacted]@host/`.
/// The password is also registered, so it is masked wherever else it shows up.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_string() };
    if let Some((_, password)) = userinfo.split_once(':') {
        register(password);
    }
    format!("{scheme}://{MASK}@{host}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_are_masked_everywhere_they_appear() {
        register("sk-test-registry-0123456789");
        let text = "HTTP 401: key sk-test-registry-0123456789 is invalid (sk-test-registry-0123456789)";
        assert_eq!(redact(text), "HTTP 401: key [redacted] is invalid ([redacted])");
    }

    #[test]
    fn short_values_are_not_secrets() {
        register("ab");
        assert_eq!(redact("ab cab"), "ab cab");
    }

    #[test]
    fn url_credentials_are_removed_and_the_password_remembered() {
        assert_eq!(redact_url("http://user:hunter2-pw@host:8080/v1"), "http://[redacted]@host:8080/v1");
        assert_eq!(redact("said hunter2-pw"), "said [redacted]");
        assert_eq!(redact_url("http://host:8080/a@b"), "http://host:8080/a@b");
        assert_eq!(redact_url("https://host"), "https://host");
    }
}
