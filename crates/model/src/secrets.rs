//! Every secret bench knows (API keys, `{env:NAME}` values of presets, passwords in URLs, values
//! of secret-looking flags and assignments in `--server-cmd`, credential headers, key-named
//! fields of `--extra-body`) is registered here the moment it is read, and `redact` removes them
//! from anything bench writes or prints: records, run.json, error messages, progress lines.
//!
//! Redaction is by value, not by place: the writers themselves pass what they write through here
//! (`redact_json_text` for run.json, the records and every JSON document, `redact` for reports and
//! both outputs), so a server that echoes a key in an answer bench stores (`/v1/models`, `/props`),
//! in its completion or in an error body cannot get it onto disk. Nor in any encoding a server or
//! a JSON writer gives it: a JSON string with any character `\u`-escaped (`\u003d`, as Gson writes
//! `=`; either case of hex) or `/` as `\/`, percent-encoding in either case of hex (`%2f`), HTML
//! entities, the base64 of HTTP Basic credentials; nor half of it where a quote is cut short.
//! None of this runs between a byte's arrival and its clock stamp: only writers call it.

use std::borrow::Cow;
use std::sync::{Mutex, OnceLock};

/// Shown in place of a secret.
pub const MASK: &str = "[redacted]";

/// Secrets shorter than this are not registered: masking every "a" in a message would destroy it,
/// and a 1-3 character secret is no secret.
const MIN_SECRET_CHARS: usize = 4;

/// What is registered: each secret as given (matched also inside decoded text, whatever escapes
/// it went through), and the fixed encodings of each (matched as they are, and the tails a cut
/// leaves are checked against them).
#[derive(Default)]
struct Known {
    /// The secrets themselves, longest first.
    plain: Vec<String>,
    /// The secrets and their whole encodings, longest first.
    forms: Vec<String>,
}

fn registry() -> &'static Mutex<Known> {
    static SECRETS: OnceLock<Mutex<Known>> = OnceLock::new();
    SECRETS.get_or_init(|| Mutex::new(Known::default()))
}

fn known() -> std::sync::MutexGuard<'static, Known> {
    registry().lock().unwrap_or_else(|p| p.into_inner())
}

/// Remembers `secret`, and each encoding of it a server may echo, so that `redact` masks them
/// from now on.
pub fn register(secret: &str) {
    if secret.chars().count() < MIN_SECRET_CHARS {
        return;
    }
    let json = serde_json::to_string(secret).map(|q| q[1..q.len() - 1].to_string()).unwrap_or_default();
    let forms = [
        secret.to_string(),
        json.replace('/', "\\/"),
        json,
        percent_encode(secret, true),
        percent_encode(secret, false),
        html_escape(secret),
    ];
    let mut known = known();
    if !known.plain.iter().any(|s| s == secret) {
        known.plain.push(secret.to_string());
        // Longest first, so a secret that contains another is masked whole.
        known.plain.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
    for form in forms {
        if form.chars().count() >= MIN_SECRET_CHARS && !known.forms.contains(&form) {
            known.forms.push(form);
        }
    }
    known.forms.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Registers `value` when it looks like a secret: for values found by name (a flag, a variable,
/// a body field), where a name can mislead (`--auth none`, `-k 1`). A word of lowercase letters
/// alone, or a short number, would be masked in every record that happens to hold it.
fn register_if_secret_like(value: &str) {
    let word = !value.is_empty() && value.chars().all(|c| c.is_ascii_lowercase());
    let short_number = value.chars().all(|c| c.is_ascii_digit()) && value.len() < 8;
    if !word && !short_number {
        register(value);
    }
}

/// Whether nothing is registered (most reading verbs): the writers then have nothing to mask.
fn nothing_known() -> bool {
    known().forms.is_empty()
}

/// `text` with every registered secret replaced by `MASK`: each whole encoding as it is, then each
/// secret inside the text read as JSON escapes, as percent-encoding and as HTML entities (so a
/// mix, `\u003d` beside a plain `/`, or `%2f` in lowercase, is found too).
pub fn redact(text: &str) -> String {
    let known = known();
    let mut out = text.to_string();
    if known.plain.is_empty() {
        return out;
    }
    for form in known.forms.iter() {
        if out.contains(form.as_str()) {
            out = out.replace(form.as_str(), MASK);
        }
    }
    for (trigger, decode) in VIEWS {
        if out.contains(*trigger) {
            out = mask_decoded(&out, *decode, &known.plain);
        }
    }
    out
}

/// `text` (a JSON document, or JSON lines) with every registered secret masked inside its
/// strings, keys included: each string is decoded, redacted (`redact`) and written back as JSON
/// when it changed, so the document stays valid JSON and nothing outside a string (a number that
/// happens to spell a secret) is touched. Unchanged text is returned as it is.
pub fn redact_json_text(text: &str) -> Cow<'_, str> {
    if nothing_known() {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let (mut out, mut copied, mut i) = (String::new(), 0, 0);
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < bytes.len() && bytes[i] != b'"' {
            // `"` and `\` are ASCII: skipping the byte after a backslash never lands inside a
            // character that could be one of them.
            i += if bytes[i] == b'\\' { 2 } else { 1 };
        }
        let end = (i + 1).min(bytes.len());
        i = end;
        let token = &text[start..end];
        let value: Option<Cow<str>> = match token.contains('\\') {
            true => serde_json::from_str::<String>(token).ok().map(Cow::Owned),
            false if token.len() >= 2 && token.ends_with('"') => {
                Some(Cow::Borrowed(&token[1..token.len() - 1]))
            }
            false => None,
        };
        let Some(value) = value else { continue };
        let masked = redact(&value);
        if masked != *value {
            out.push_str(&text[copied..start]);
            out.push_str(&serde_json::to_string(&masked).unwrap_or_else(|_| format!("\"{MASK}\"")));
            copied = end;
        }
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// `redact_json_text` of bytes that are JSON text (anything else is returned as it is).
pub fn redact_json_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    match std::str::from_utf8(bytes).map(redact_json_text) {
        Ok(Cow::Owned(text)) => Cow::Owned(text.into_bytes()),
        _ => Cow::Borrowed(bytes),
    }
}

/// `redact` of bytes that are text (anything else is returned as it is).
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    if nothing_known() {
        return Cow::Borrowed(bytes);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => match redact(text) {
            masked if masked == text => Cow::Borrowed(bytes),
            masked => Cow::Owned(masked.into_bytes()),
        },
        Err(_) => Cow::Borrowed(bytes),
    }
}

/// Registers the string values of `value`'s fields whose names say they hold a credential
/// (`api_key`, `apiKey`, `x_auth_token`, `password`, `credentials`), at any depth: `--extra-body`
/// fields travel in every request body and in run.json.
pub fn register_secret_fields(value: &serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (name, v) in map {
                if let (true, Some(text)) = (secret_name(name), v.as_str()) {
                    register_if_secret_like(text);
                }
                register_secret_fields(v);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(register_secret_fields),
        _ => {}
    }
}

/// A decoder of one encoding: the text's bytes decoded, each decoded byte with the offset in
/// the text of the escape it came from.
type Decode = fn(&str) -> Decoded;

/// The encodings `redact` reads text as, each with the character that announces it.
const VIEWS: &[(char, Decode)] = &[('\\', json_unescaped), ('%', percent_decoded), ('&', html_unescaped)];

#[derive(Default)]
struct Decoded {
    bytes: Vec<u8>,
    /// `from[i]`: where in the text the escape that gave `bytes[i]` starts; one more entry, the
    /// text's length.
    from: Vec<usize>,
}

impl Decoded {
    fn push(&mut self, at: usize, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        self.from.extend(std::iter::repeat_n(at, bytes.len()));
    }
}

/// `text` with each span whose decoding is one of `plain` masked. A span runs from the escape
/// where the secret's first byte came from to the one after its last, so a mask never leaves
/// half an escape behind.
fn mask_decoded(text: &str, decode: Decode, plain: &[String]) -> String {
    let mut decoded = decode(text);
    decoded.from.push(text.len());
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for secret in plain {
        let needle = secret.as_bytes();
        let mut at = 0;
        while let Some(found) = find(&decoded.bytes[at..], needle) {
            let (a, b) = (at + found, at + found + needle.len());
            // The escape that gave the last byte ends where the next escape starts.
            let end =
                decoded.from[b..].iter().copied().find(|&f| f > decoded.from[b - 1]).unwrap_or(text.len());
            spans.push((decoded.from[a], end));
            at = b;
        }
    }
    if spans.is_empty() {
        return text.to_string();
    }
    spans.sort();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, end) in spans {
        if start < copied {
            continue; // inside a longer secret already masked
        }
        out.push_str(&text[copied..start]);
        out.push_str(MASK);
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `text` read as the inside of a JSON string: `\uXXXX` (either case, surrogate pairs joined),
/// `\/`, `\"`, `\\`, `\'` and the control escapes decoded; anything else as it is.
fn json_unescaped(text: &str) -> Decoded {
    let bytes = text.as_bytes();
    let hex4 = |at: usize| -> Option<u32> {
        let digits = text.get(at..at + 4)?;
        digits.bytes().all(|b| b.is_ascii_hexdigit()).then(|| u32::from_str_radix(digits, 16).ok())?
    };
    let mut out = Decoded::default();
    let mut i = 0;
    while i < bytes.len() {
        let c = text[i..].chars().next().unwrap_or('\0');
        if c != '\\' {
            out.push(i, c.to_string().as_bytes());
            i += c.len_utf8();
            continue;
        }
        let simple = match bytes.get(i + 1) {
            Some(b'/') => Some('/'),
            Some(b'"') => Some('"'),
            Some(b'\\') => Some('\\'),
            Some(b'\'') => Some('\''),
            Some(b'n') => Some('\n'),
            Some(b't') => Some('\t'),
            Some(b'r') => Some('\r'),
            Some(b'b') => Some('\u{8}'),
            Some(b'f') => Some('\u{c}'),
            _ => None,
        };
        if let Some(decoded) = simple {
            out.push(i, decoded.to_string().as_bytes());
            i += 2;
            continue;
        }
        let unit = (bytes.get(i + 1) == Some(&b'u')).then(|| hex4(i + 2)).flatten();
        let (decoded, len) = match unit {
            Some(high @ 0xD800..=0xDBFF) => {
                let low = (text.get(i + 6..i + 8) == Some("\\u")).then(|| hex4(i + 8)).flatten();
                match low {
                    Some(low @ 0xDC00..=0xDFFF) => {
                        (char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)), 12)
                    }
                    _ => (None, 1),
                }
            }
            Some(unit) => (char::from_u32(unit), 6),
            None => (None, 1),
        };
        match decoded {
            Some(d) => out.push(i, d.to_string().as_bytes()),
            None => out.push(i, b"\\"),
        }
        i += if decoded.is_some() { len } else { 1 };
    }
    out
}

/// `text` with each `%XX` (either case of hex) decoded to its byte.
fn percent_decoded(text: &str) -> Decoded {
    let bytes = text.as_bytes();
    let mut out = Decoded::default();
    let mut i = 0;
    while i < bytes.len() {
        let hex = text.get(i + 1..i + 3).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(i, &[b]);
                i += 3;
            }
            (b, _) => {
                out.push(i, &[b]);
                i += 1;
            }
        }
    }
    out
}

/// `text` with HTML's character references decoded: the named ones an escaper writes (`&amp;`,
/// `&lt;`, `&gt;`, `&quot;`, `&apos;`) and numeric ones (`&#39;`, `&#x2F;`).
fn html_unescaped(text: &str) -> Decoded {
    let bytes = text.as_bytes();
    let mut out = Decoded::default();
    let mut i = 0;
    while i < bytes.len() {
        let reference = (bytes[i] == b'&')
            .then(|| text[i + 1..].find(';').filter(|&n| n <= 8).map(|n| &text[i + 1..i + 1 + n]))
            .flatten();
        let decoded = reference.and_then(|r| match r {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            r => match r.strip_prefix("#x").or_else(|| r.strip_prefix("#X")) {
                Some(hex) => u32::from_str_radix(hex, 16).ok().and_then(char::from_u32),
                None => r.strip_prefix('#').and_then(|d| d.parse().ok()).and_then(char::from_u32),
            },
        });
        match (decoded, reference) {
            (Some(d), Some(r)) => {
                out.push(i, d.to_string().as_bytes());
                i += r.len() + 2;
            }
            _ => {
                out.push(i, &[bytes[i]]);
                i += 1;
            }
        }
    }
    out
}

/// `text` with the five characters an HTML escaper may replace (`&`, `<`, `>`, `"`, `'`) as
/// entities: one whole form of a secret in a page. An escaper that leaves some of them as they are
/// (the HTML report's template keeps `'`) writes a mix, which `html_unescaped` finds.
fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The first `chars` characters of `text`, redacted: redaction runs on the whole text before the
/// cut (a cut through a secret would leave half of it that no longer matches), and a tail that is
/// the beginning of a secret (the text itself was cut by a reader's byte cap) is masked too, in
/// any encoding `redact` reads, an escape cut short included (`...sk-abc\u00`).
pub fn redact_prefix(text: &str, chars: usize) -> String {
    let mut out: String = redact(text).chars().take(chars).collect();
    let known = known();
    // Where a masked tail would start: the earliest start of a secret's beginning that ends the
    // text, read plain or decoded, with up to `MAX_ESCAPE_CHARS` characters of a cut escape after it.
    const MAX_ESCAPE_CHARS: usize = 6;
    let mut ends: Vec<usize> = out.char_indices().rev().take(MAX_ESCAPE_CHARS).map(|(i, _)| i).collect();
    ends.insert(0, out.len());
    let plain_view: Decode = |t| {
        let mut d = Decoded::default();
        t.bytes().enumerate().for_each(|(i, b)| d.push(i, &[b]));
        d
    };
    let views = std::iter::once(plain_view).chain(VIEWS.iter().map(|(_, decode)| *decode));
    let mut tail_from: Option<usize> = None;
    for decode in views {
        for &end in &ends {
            let decoded = decode(&out[..end]);
            for secret in &known.plain {
                // Proper prefixes of more than MIN_SECRET_CHARS characters (a shorter one gives
                // little away and would mask ordinary words).
                let bounds = secret.char_indices().map(|(i, _)| i).skip(MIN_SECRET_CHARS + 1);
                if let Some(len) = bounds.filter(|&n| decoded.bytes.ends_with(&secret.as_bytes()[..n])).max()
                {
                    let from = decoded.from[decoded.bytes.len() - len];
                    tail_from = Some(tail_from.map_or(from, |f| f.min(from)));
                }
            }
        }
    }
    if let Some(from) = tail_from {
        out.truncate(from);
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

/// Whether a name (of a flag, a variable or a body field) says it holds a credential: one of its
/// words (split at `-`, `_` and lowercase-to-uppercase: `apiKey`) is key, apikey, token, auth,
/// authorization, bearer, credential(s), or it has password, passwd or secret in it. A key file
/// (`--key-file`) or a token count (`max_tokens`) is not one.
fn secret_name(name: &str) -> bool {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() || (c.is_ascii_uppercase() && previous_lower) {
            words.extend((!word.is_empty()).then(|| std::mem::take(&mut word)));
        }
        if c.is_ascii_alphanumeric() {
            word.push(c.to_ascii_lowercase());
        }
        previous_lower = c.is_ascii_lowercase();
    }
    words.extend((!word.is_empty()).then_some(word));
    let lower = name.to_ascii_lowercase();
    const WORDS: &[&str] =
        &["key", "apikey", "token", "auth", "authorization", "bearer", "credential", "credentials"];
    words.iter().any(|w| WORDS.contains(&w.as_str()))
        && !matches!(words.last().map(String::as_str), Some("file" | "path" | "dir" | "tokens" | "id"))
        || ["password", "passwd", "secret"].iter().any(|w| lower.contains(w))
}

/// Whether a flag (`--api-key`, `--apikey`, `--hf-token`, `--auth`, `--bearer`, `--credential`,
/// `--db-password`, `--secret`, and `-k`) carries a secret.
fn secret_flag(flag: &str) -> bool {
    flag.starts_with('-') && (flag == "-k" || secret_name(flag))
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

/// Whether an environment assignment's name (`API_KEY`, `MY_APIKEY`, `HF_TOKEN`, `SERVICE_AUTH`,
/// `DB_PASSWORD`) holds a secret.
fn secret_variable(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && secret_name(name)
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
            && !command[value.0..value.1].starts_with('-')
        {
            // A flag after it means this one took no value (`-k --port 8080`).
            masked.push(value);
        } else if word.contains(['\'', '"']) {
            let inner = unquote(word);
            if inner.contains(char::is_whitespace) {
                secret_values(&inner);
            }
        }
    }
    for &(start, end) in &masked {
        register_if_secret_like(&command[start..end]);
        register_if_secret_like(&unquote(&command[start..end]));
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

/// Every byte but the unreserved ones (RFC 3986) as `%XX`, in upper or lower case hex.
fn percent_encode(text: &str, upper: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else if upper {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push_str(&format!("%{b:02x}"));
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
    fn a_secret_escaped_by_any_json_writer_is_masked() {
        register("sk-json/01=ab+cd<e>&f'g");
        // Gson escapes `=`, `<`, `>`, `&`, `'` (lowercase hex) and leaves `/` and `+`.
        let gson = r"sk-json/01\u003dab+cd\u003ce\u003e\u0026f\u0027g";
        assert_eq!(redact(&format!("key {gson}!")), "key [redacted]!");
        // Uppercase hex, every punctuation escaped, `/` as `\/`, beside other escapes.
        let all = r"sk\u002Djson\/01\u003Dab\u002Bcd\u003Ce\u003E\u0026f\u0027g";
        assert_eq!(redact(&format!(r#"{{"k":"{all}\n"}}"#)), r#"{"k":"[redacted]\n"}"#);
        // An escape that is not part of the secret stays whole.
        assert_eq!(redact(r"\u003dsk-json/01=ab+cd<e>&f'g"), r"\u003d[redacted]");
    }

    #[test]
    fn a_secret_percent_encoded_in_either_case_is_masked() {
        register("sk-pct/01=ab+c");
        assert_eq!(redact("?key=sk-pct%2f01%3dab%2bc&x=1"), "?key=[redacted]&x=1");
        assert_eq!(redact("?key=sk-pct%2F01%3Dab%2Bc"), "?key=[redacted]");
        // Partly encoded, as an encoder that keeps `+` and `=` writes it.
        assert_eq!(redact("/v1?k=sk-pct%2f01=ab+c"), "/v1?k=[redacted]");
    }

    #[test]
    fn a_secret_html_escaped_is_masked() {
        register("sk-html<01>&'\"x");
        assert_eq!(redact("<dd>sk-html&lt;01&gt;&amp;&#39;&quot;x</dd>"), "<dd>[redacted]</dd>");
        assert_eq!(redact("sk-html&#x3C;01&#62;&amp;&apos;&quot;x"), "[redacted]");
        // As the HTML report's template writes it: `'` kept as it is.
        assert_eq!(redact("<dd>sk-html&lt;01&gt;&amp;'&quot;x</dd>"), "<dd>[redacted]</dd>");
    }

    #[test]
    fn json_text_is_redacted_inside_its_strings_and_stays_json() {
        register("sk-doc/0123=45");
        register("9876543210");
        let text = r#"{"a":"x sk-doc/0123=45 y","sk-doc/0123=45":1,"n":9876543210,"e":"sk-doc\/0123\u003d45","r":"raw \\u003d sk-doc/0123\\u003d45"}"#;
        let out = redact_json_text(text);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["a"], "x [redacted] y");
        assert_eq!(v["[redacted]"], 1);
        assert_eq!(v["n"], 9876543210u64, "a number is not a string: {out}");
        assert_eq!(v["e"], "[redacted]");
        // A string that quotes escaped text (an error body) has the escaped form masked too.
        assert_eq!(v["r"], r"raw \u003d [redacted]");
        assert!(matches!(redact_json_text(r#"{"a":"nothing here"}"#), Cow::Borrowed(_)));
    }

    #[test]
    fn the_names_of_credentials_are_known_and_their_values_remembered() {
        for flag in [
            "--api-key",
            "--apikey",
            "--auth",
            "--bearer",
            "--credential",
            "--credentials",
            "-k",
            "--hf-token",
        ] {
            assert!(secret_flag(flag), "{flag}");
        }
        for flag in ["--key-file", "--port", "--author", "--max-tokens", "--tokenizer", "-m", "--keep"] {
            assert!(!secret_flag(flag), "{flag}");
        }
        for var in ["MY_APIKEY", "SERVICE_AUTH", "API_KEY", "HF_TOKEN", "DB_PASSWORD", "BEARER"] {
            assert!(secret_variable(var), "{var}");
        }
        assert!(!secret_variable("CUDA_VISIBLE_DEVICES") && !secret_variable("AUTHOR"));
        assert_eq!(
            redact_command(
                "MY_APIKEY=apk-0001x SERVICE_AUTH=sa-0002y srv --apikey ak-0003z --auth au-0004w -k kk-0005v --bearer be-0006u --credential cr-0007t --port 1"
            ),
            "MY_APIKEY=[redacted] SERVICE_AUTH=[redacted] srv --apikey [redacted] --auth [redacted] -k [redacted] --bearer [redacted] --credential [redacted] --port 1"
        );
        assert_eq!(
            redact("apk-0001x sa-0002y ak-0003z au-0004w kk-0005v be-0006u cr-0007t"),
            [MASK; 7].join(" ")
        );
        // A flag with no value (`-k` before another flag) masks nothing; a plain word or a short
        // number found by name is masked in the command but not remembered.
        assert_eq!(redact_command("curl -k --port 8080"), "curl -k --port 8080");
        assert_eq!(
            redact_command("srv --auth none --token 1234"),
            "srv --auth [redacted] --token [redacted]"
        );
        assert_eq!(redact("auth none, 1234 tokens"), "auth none, 1234 tokens");
        register_secret_fields(
            &serde_json::json!({"api_key": "bk-field-01", "meta": {"authToken": "bk-field-02"}, "max_tokens_x": "bk-not-03", "tokenizer": "auto-x1"}),
        );
        assert_eq!(
            redact("bk-field-01 bk-field-02 bk-not-03 auto-x1"),
            "[redacted] [redacted] bk-not-03 auto-x1"
        );
    }

    #[test]
    fn a_cut_never_leaves_half_a_secret() {
        register("sk-halfcut-abcdefghijkl");
        let text = format!("{}sk-halfcut-abcdefghijkl tail", "x".repeat(10));
        assert_eq!(redact_prefix(&text, 20), format!("{}[redacted]", "x".repeat(10)));
        // The text itself ended inside a secret (a byte cap cut it before the quote).
        assert_eq!(redact_prefix("error: sk-halfcut-abc", 100), "error: [redacted]");
        assert_eq!(redact_prefix("error: sk-h", 100), "error: sk-h");
        // Cut inside an encoded form, or inside one of its escapes.
        assert_eq!(redact_prefix(r"said sk-halfcut\u002dab", 100), "said [redacted]");
        assert_eq!(redact_prefix(r"said sk-halfcut\u00", 100), "said [redacted]");
        assert_eq!(redact_prefix("said sk-halfcut%2", 100), "said [redacted]");
    }
}
