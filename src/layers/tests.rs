use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::*;

/// The text with comments and string/char literals blanked out (so `"crate::x"` in a message
/// is not an import).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let pair = |first: u8, second: u8| b[i] == first && b.get(i + 1) == Some(&second);
        if pair(b'/', b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if pair(b'/', b'*') {
            let mut depth = 0;
            while i < b.len() {
                let pair = |first: u8, second: u8| b[i] == first && b.get(i + 1) == Some(&second);
                if pair(b'/', b'*') {
                    depth += 1;
                    i += 2;
                } else if pair(b'*', b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && !ident_byte(b, i)
        {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            i += 2;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
        } else {
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

fn ident_byte(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The text without `#[cfg(test)] mod name { ... }` blocks.
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at + "#[cfg(test)]".len()..];
        let head = after.trim_start();
        let head = head.strip_prefix("pub ").unwrap_or(head).trim_start();
        let is_inline_mod =
            head.starts_with("mod ") && head.find('{').is_some_and(|o| head.find(';').is_none_or(|s| o < s));
        out.push_str(&rest[..at]);
        if !is_inline_mod {
            rest = after;
            continue;
        }
        let open = after.find('{').unwrap();
        let mut depth = 0;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Every top-level module this code names through `crate::`, including `use crate::{a, b::c}`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    paths_under(code, "crate::")
}

/// Every module named as `prefix` followed by a module: `crate::`, or a member crate's
/// `ttft_model::` (its modules are modules of the table, one level below this crate's).
fn paths_under(code: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut refs = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let after = &code[at + prefix.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let group = &group[..group.find(';').unwrap_or(group.len())];
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        start = false;
                        refs.insert(ident(&group[i..]));
                    }
                    _ => {}
                }
            }
        } else {
            refs.insert(ident(after));
        }
    }
    refs
}

/// The workspace's crates by directory: a crate of several modules (`None`: a file's module is its
/// first path component under src/), or one that is a single module of the table (`client`).
const CRATES: &[(&str, Option<&str>)] = &[
    ("", None),
    ("crates/model", None),
    ("crates/results", None),
    ("crates/client", Some("client")),
    ("crates/scripted", Some("scripted")),
];

/// The member crates' names in code, each with the module it stands for when it is a single module.
const CRATE_PATHS: &[(&str, Option<&str>)] = &[
    ("ttft_model::", None),
    ("ttft_results::", None),
    ("ttft_client", Some("client")),
    ("ttft_scripted", Some("scripted")),
];

fn top_module(src: &Path, file: &Path, single: Option<&str>) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    if let Some(module) = single {
        return Some(module.to_string());
    }
    if rel.components().count() == 1 && (first == "lib.rs" || first == "main.rs") || first == "bin" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_string())
}

/// The table's modules this code uses: through `crate::` (within its crate) and through the
/// member crates' names.
fn module_refs(code: &str, single: Option<&str>) -> BTreeSet<String> {
    let mut refs = match single {
        // Inside a single-module crate, `crate::` is that module itself.
        Some(_) => BTreeSet::new(),
        None => crate_refs(code),
    };
    for (path, module) in CRATE_PATHS {
        match module {
            Some(module) => {
                let named = code.match_indices(path).any(|(at, _)| {
                    let before = code[..at].chars().next_back();
                    let after = code[at + path.len()..].chars().next();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if named {
                    refs.insert(module.to_string());
                }
            }
            None => refs.extend(paths_under(code, path)),
        }
    }
    refs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_import_points_down_the_layer_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = BTreeSet::new();
    let mut modules = BTreeSet::new();
    for (dir, single) in CRATES {
        let src = root.join(dir).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let name = file.file_name().unwrap().to_str().unwrap();
            let Some(from) = top_module(&src, &file, *single) else { continue };
            modules.insert(from.clone());
            if name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for to in module_refs(&without_test_modules(&code_only(&text)), *single) {
                let known =
                    rank(&to).is_some() || src.join(format!("{to}.rs")).exists() || src.join(&to).is_dir();
                if let Some(why) = violation(&from, &to).filter(|_| to != from && known) {
                    problems.insert(format!("{}: {why}", file.strip_prefix(root).unwrap().display()));
                }
            }
        }
    }
    for module in &modules {
        assert!(rank(module).is_some(), "{module}: add it to the layer table in src/layers.rs");
    }
    assert!(
        problems.is_empty(),
        "imports that point up the layer table:\n{}",
        Vec::from_iter(problems).join("\n")
    );
}

#[test]
fn the_reader_finds_imports_and_skips_what_is_not_code() {
    let code = code_only(
        "use crate::{record::{A, B}, stats, clock::now};\n// crate::verify in a comment\n\
         let s = \"crate::merge\"; let c = '\"'; x = crate::spec::Api;\n\
         #[cfg(test)]\nmod tests { use crate::runner; }\n",
    );
    let refs = crate_refs(&without_test_modules(&code));
    assert_eq!(Vec::from_iter(refs), ["clock", "record", "spec", "stats"]);
    let code = code_only(
        "use ttft_model::{record::A, spec};\nuse ttft_client::body::Body;\nlet x = ttft_clients;\n",
    );
    assert_eq!(Vec::from_iter(module_refs(&code, None)), ["client", "record", "spec"]);
    assert_eq!(
        Vec::from_iter(module_refs("crate::sse::x; ttft_model::exit::Failure", Some("client"))),
        ["exit"]
    );
    assert_eq!(violation("record", "spec"), None);
    assert!(violation("record", "quality").unwrap().contains("only lower layers"));
    assert!(violation("verify", "runner").unwrap().contains("never use each other"));
    assert!(violation("merge", "verify").is_some(), "equal ranks do not use each other");
}
