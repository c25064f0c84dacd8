//! Every secret bench knows (API keys, `{env:NAME}` values of presets, passwords in URLs, values
//! of secret-looking flags in `--server-cmd`) is registered here the moment it is read, and
//! `redact` removes them from anything bench writes or prints: records, run.json, error messages,
//! progress lines. A server that echoes a key back in an error body or in its completion must not
//! get it onto disk, in any of the encodings bench itself puts it in (the base64 of HTTP Basic
//! credentials, a JSON string with `/` escaped as `\/`, percent-encoding), nor half of it where a
//! quote is cut short.

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

/// Remembers `secret`, and each encoding of it a server may echo, so that `redact` masks them
/// from now on.
pub fn register(secret: &str) {
    if secret.chars().count() < MIN_SECRET_CHARS {
        return;
    }
    let json = serde_json::to_string(secret).map(|q| q[1..q.len() - 1].to_string()).unwrap_or_default();
    let forms = [secret.to_string(), json.replace('/', "\\/"), json, percent_encode(secret)];
    let mut known = registry().lock().unwrap_or_else(|p| p.into_inner());
    for form in forms {
        if form.chars().count() >= MIN_SECRET_CHARS && !known.contains(&form) {
            known.push(form);
        }
    }
    // Longest first, so a secret that contains another is masked whole.
    known.sort_by_key(|s| std::cmp::Reverse(s.len()));
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

/// The first `chars` characters of `text`, redacted: redaction runs on the whole text before the
/// cut (a cut through a secret would leave half of it that no longer matches), and a tail that is
/// the beginning of a secret (the text itself was cut by a reader's byte cap) is masked too.
pub fn redact_prefix(text: &str, chars: usize) -> String {
    let mut out: String = redact(text).chars().take(chars).collect();
    let known = registry().lock().unwrap_or_else(|p| p.into_inner());
    let longest_tail = known
        .iter()
        .filter_map(|secret| {
            // The longest proper prefix of `secret` longer than MIN_SECRET_CHARS that ends `out`
            // (a shorter one gives little away and would mask ordinary words).
            let bounds = secret.char_indices().map(|(i, _)| i).skip(MIN_SECRET_CHARS + 1);
            bounds.filter(|&end| out.ends_with(&secret[..end])).max()
        })
        .max();
    if let Some(len) = longest_tail {
        out.truncate(out.len() - len);
        out.push_str(MASK);
    }
    out
}

/// `url` with its password (and user) removed: `http://user:pass@host/` -> `http://[redacted]@host/`.
/// The password is also registered (as written and percent-decoded), and so is the base64 of
/// `user:password`, the HTTP Basic credentials the client sends for it, so that they are masked
/// wherever else they show up.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_string() };
    if let Some((user, password)) = userinfo.split_once(':') {
        let (user_plain, password_plain) = (percent_decode(user), percent_decode(password));
        for pw in [password, password_plain.as_str()] {
            register(pw);
        }
        for basic in [format!("{user}:{password}"), format!("{user_plain}:{password_plain}")] {
            register(&base64(basic.as_bytes()));
        }
    }
    format!("{scheme}://{MASK}@{host}{tail}")
}

/// Whether a flag (`--api-key`, `--hf-token`, `--db-password`, `--secret`) carries a secret.
fn secret_flag(flag: &str) -> bool {
    let name = flag.trim_start_matches('-').to_ascii_lowercase().replace('_', "-");
    flag.starts_with('-')
        && (name == "key"
            || name.ends_with("-key")
            || name == "token"
            || name.ends_with("-token")
            || name.contains("password")
            || name.contains("passwd")
            || name.contains("secret"))
}

/// Whether an HTTP header carries a credential: Authorization and Proxy-Authorization, Cookie,
/// and any name with key, token, secret, password or auth in it (`X-Api-Key`, `X-Auth-Token`).
pub fn secret_header(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    name == "cookie"
        || ["key", "token", "secret", "password", "passwd", "auth"].iter().any(|word| name.contains(word))
}

/// A `--header` line (`Name: value`) fit to be written or shown: a credential header's value is
/// masked and registered (whole, and the part after a scheme such as `Bearer`), so it is also
/// masked wherever else it shows up (a server echoing it).
pub fn redact_header(line: &str) -> String {
    let Some((name, value)) = line.split_once(':') else { return redact(line) };
    let value = value.trim();
    if !secret_header(name) {
        return redact(line);
    }
    register(value);
    if let Some((_, credential)) = value.split_once(' ') {
        register(credential.trim());
    }
    format!("{}: {MASK}", name.trim())
}

/// Whether an environment assignment's name (`API_KEY`, `HF_TOKEN`, `DB_PASSWORD`) holds a secret.
fn secret_variable(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && (upper == "KEY"
            || upper.ends_with("_KEY")
            || upper == "TOKEN"
            || upper.ends_with("_TOKEN")
            || upper.contains("PASSWORD")
            || upper.contains("PASSWD")
            || upper.contains("SECRET"))
}

/// The words of a shell command line as byte ranges, quotes kept inside the word (`'a b'` is one
/// word). An unbalanced quote runs to the end.
fn words(command: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in command.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (Some('\''), '\'') => quote = None,
            (Some('\''), _) => {}
            (_, '\\') => escaped = true,
            (Some('"'), '"') => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => {
                quote = Some(c);
                start.get_or_insert(i);
                continue;
            }
            (None, c) if c.is_whitespace() || c == ';' || c == '&' || c == '|' => {
                if let Some(s) = start.take() {
                    out.push((s, i));
                }
                continue;
            }
            (None, _) => {}
        }
        start.get_or_insert(i);
    }
    if let Some(s) = start {
        out.push((s, command.len()));
    }
    out
}

/// A word without its shell quoting: `'a b'` -> `a b`, `"x"` -> `x`, `a\ b` -> `a b`.
fn unquote(word: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (Some('"') | None, '\\') => out.extend(chars.next()),
            (_, c) => out.push(c),
        }
    }
    out
}

/// A `--server-cmd` command line fit to be written or shown: the value of every secret-looking
/// flag (`--api-key KEY`, `--hf-token=TOKEN`, `--password`, `--*-key`) and environment assignment
/// (`API_KEY=...`, `HF_TOKEN=...`, `DB_PASSWORD=...`) masked, and every known secret with them.
/// Each value masked is registered, so it is masked wherever else it shows up (the server's own
/// stderr, an error message quoting the command).
pub fn redact_command(command: &str) -> String {
    let masked = secret_values(command);
    let mut out = String::with_capacity(command.len());
    let mut at = 0;
    for (start, end) in masked {
        if start < at {
            continue; // inside a value already masked (`--api-key KEY=abc`)
        }
        out.push_str(&command[at..start]);
        out.push_str(MASK);
        at = end;
    }
    out.push_str(&command[at..]);
    redact(&out)
}

/// The byte ranges of `command` that hold secret values, each registered (as written and
/// unquoted). A quoted word that is itself a command line (`sh -c '... --api-key K'`) has its
/// secrets registered, so the final `redact` masks them inside the quotes.
fn secret_values(command: &str) -> Vec<(usize, usize)> {
    let spans = words(command);
    let mut masked: Vec<(usize, usize)> = Vec::new();
    for (n, &(start, end)) in spans.iter().enumerate() {
        let word = &command[start..end];
        if let Some((name, _)) = word.split_once('=')
            && (secret_flag(name) || secret_variable(name))
        {
            masked.push((start + name.len() + 1, end));
        } else if secret_flag(word)
            && let Some(&value) = spans.get(n + 1)
        {
            masked.push(value);
        } else if word.contains(['\'', '"']) {
            let inner = unquote(word);
            if inner.contains(char::is_whitespace) {
                secret_values(&inner);
            }
        }
    }
    for &(start, end) in &masked {
        register(&command[start..end]);
        register(&unquote(&command[start..end]));
    }
    masked
}

/// Standard base64 with padding (RFC 4648), as HTTP Basic credentials are sent.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Every byte but the unreserved ones (RFC 3986) as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `%XX` sequences decoded (invalid ones and invalid UTF-8 left as they are).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
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

    #[test]
    fn secret_flags_and_assignments_of_a_command_are_masked_and_remembered() {
        let cmd = "HF_TOKEN=hf_cmdtok123 llama-server --port 8080 --api-key sk-cmd-flag-1 \
                   --hf-token='quoted tok' -m model.gguf --db_password=pw-cmd-42 --key-file k.pem";
        assert_eq!(
            redact_command(cmd),
            "HF_TOKEN=[redacted] llama-server --port 8080 --api-key [redacted] \
                   --hf-token=[redacted] -m model.gguf --db_password=[redacted] --key-file k.pem"
        );
        assert_eq!(
            redact("stderr: key sk-cmd-flag-1, tok quoted tok"),
            "stderr: key [redacted], tok [redacted]"
        );
        // Inside a quoted `sh -c` script as well.
        assert_eq!(
            redact_command("sh -c 'exec llama-server --api-key sk-inner-77 --port {port} & wait'"),
            "sh -c 'exec llama-server --api-key [redacted] --port {port} & wait'"
        );
        // A value that is itself an assignment is masked once.
        assert_eq!(redact_command("x --token KEY=abcdefg"), "x --token [redacted]");
    }

    #[test]
    fn the_encodings_of_a_secret_are_masked() {
        register("sk-enc/0123+45");
        assert_eq!(redact(r#"{"k":"sk-enc\/0123+45"}"#), r#"{"k":"[redacted]"}"#);
        assert_eq!(redact("?key=sk-enc%2F0123%2B45"), "?key=[redacted]");
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        redact_url("http://ali%40x:pw%3Asecret@host/");
        assert_eq!(redact("Basic YWxpQHg6cHc6c2VjcmV0"), "Basic [redacted]");
        assert_eq!(redact("pw:secret"), "[redacted]");
    }

    #[test]
    fn a_cut_never_leaves_half_a_secret() {
        register("sk-halfcut-abcdefghijkl");
        let text = format!("{}sk-halfcut-abcdefghijkl tail", "x".repeat(10));
        assert_eq!(redact_prefix(&text, 20), format!("{}[redacted]", "x".repeat(10)));
        // The text itself ended inside a secret (a byte cap cut it before the quote).
        assert_eq!(redact_prefix("error: sk-halfcut-abc", 100), "error: [redacted]");
        assert_eq!(redact_prefix("error: sk-h", 100), "error: sk-h");
    }
}
