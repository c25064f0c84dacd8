//! Parsing of the small value languages used on the command line and in scenario files:
//! context lists (`1024..32768`, `1k,4k,32k`), durations (`2s`, `240s`) and comma lists.
//!
//! Every error names the flag (or scenario key) it came from, so `bench` can say exactly which input
//! was wrong.

use std::time::Duration;

/// Parses a context spec into token counts.
///
/// - `A..B` doubles from A up to B (B must be A x 2^n, so nothing is silently skipped);
/// - `A,B,C` is an explicit list; every item may carry a `k` suffix (x1024);
/// - the two forms can be mixed: `512,1k..4k`.
pub fn parse_contexts(flag: &str, spec: &str) -> Result<Vec<u32>, String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(format!("{flag}: empty context list (try 1024..32768 or 1k,4k,32k)"));
    }
    let mut out: Vec<u32> = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        if let Some((lo, hi)) = part.split_once("..") {
            let lo = parse_tokens(flag, lo)?;
            let hi = parse_tokens(flag, hi)?;
            if lo > hi {
                return Err(format!("{flag}: range {part} runs backwards ({lo} > {hi})"));
            }
            let mut value = lo;
            let mut steps = vec![lo];
            while value < hi {
                value = value.checked_mul(2).ok_or_else(|| format!("{flag}: range {part} overflows"))?;
                steps.push(value);
            }
            if value != hi {
                let shown: Vec<String> = steps.iter().map(u32::to_string).collect();
                return Err(format!(
                    "{flag}: range {part} doubles {} and never lands on {hi}; \
                     give an end that is the start doubled, or list the sizes with commas",
                    shown.join(", ")
                ));
            }
            out.extend(steps);
        } else {
            out.push(parse_tokens(flag, part)?);
        }
    }
    for (i, value) in out.iter().enumerate() {
        if out[..i].contains(value) {
            return Err(format!("{flag}: context {value} is listed twice in {spec:?}"));
        }
    }
    Ok(out)
}

/// `4096`, `4k`, `4K` -> 4096. Zero is refused: a context must hold at least the question.
pub fn parse_tokens(flag: &str, text: &str) -> Result<u32, String> {
    let text = text.trim();
    let (digits, scale) = match text.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1024u32),
        None => (text, 1),
    };
    let value: u32 = digits
        .parse()
        .map_err(|_| format!("{flag}: {text:?} is not a token count (examples: 512, 4k, 32768)"))?;
    let value = value.checked_mul(scale).ok_or_else(|| format!("{flag}: {text:?} is too large"))?;
    if value == 0 {
        return Err(format!("{flag}: a context of 0 tokens cannot be measured"));
    }
    Ok(value)
}

/// Comma list of positive integers (`1,2,4`).
pub fn parse_positive_list(flag: &str, spec: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let value: u32 = part.parse().map_err(|_| format!("{flag}: {part:?} is not a whole number"))?;
        if value == 0 {
            return Err(format!("{flag}: 0 is not allowed"));
        }
        if out.contains(&value) {
            return Err(format!("{flag}: {value} is listed twice"));
        }
        out.push(value);
    }
    Ok(out)
}

/// Comma list of names, each parsed by `one` (modes, cache states).
pub fn parse_name_list<T: PartialEq>(
    flag: &str,
    spec: &str,
    one: impl Fn(&str) -> Option<T>,
    allowed: &str,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let value =
            one(part).ok_or_else(|| format!("{flag}: unknown value {part:?} (allowed: {allowed})"))?;
        if out.contains(&value) {
            return Err(format!("{flag}: {part} is listed twice"));
        }
        out.push(value);
    }
    if out.is_empty() {
        return Err(format!("{flag}: empty list (allowed: {allowed})"));
    }
    Ok(out)
}

/// `2s`, `1500ms`, `4m`, or a bare number of seconds (`30`, `0.5`).
pub fn parse_duration(flag: &str, text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{flag}: {text:?} is not a duration ({e}; examples: 2s, 1500ms, 4m)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_doubles_from_start_to_end() {
        assert_eq!(
            parse_contexts("--contexts", "1024..32768").unwrap(),
            vec![1024, 2048, 4096, 8192, 16384, 32768]
        );
        assert_eq!(parse_contexts("--contexts", "1k..4k").unwrap(), vec![1024, 2048, 4096]);
        assert_eq!(parse_contexts("--contexts", "512..512").unwrap(), vec![512]);
    }

    #[test]
    fn lists_and_k_suffixes() {
        assert_eq!(parse_contexts("--contexts", "1k,4k,32k").unwrap(), vec![1024, 4096, 32768]);
        assert_eq!(parse_contexts("--contexts", " 500 , 2K ").unwrap(), vec![500, 2048]);
        assert_eq!(parse_contexts("--contexts", "256,1k..2k").unwrap(), vec![256, 1024, 2048]);
    }

    #[test]
    fn bad_specs_name_the_flag_and_the_problem() {
        let cases = [
            ("", "empty"),
            ("1k..", "not a token count"),
            ("4k..1k", "backwards"),
            ("1000..5000", "never lands on 5000"),
            ("abc", "not a token count"),
            ("0", "0 tokens"),
            ("1k,1024", "listed twice"),
            ("99999999k", "too large"),
        ];
        for (spec, expected) in cases {
            let err = parse_contexts("--contexts", spec).unwrap_err();
            assert!(err.starts_with("--contexts"), "{spec}: {err}");
            assert!(err.contains(expected), "{spec}: {err}");
        }
    }

    #[test]
    fn positive_lists() {
        assert_eq!(parse_positive_list("--batch-sizes", "1,2,4").unwrap(), vec![1, 2, 4]);
        assert!(parse_positive_list("--batch-sizes", "1,0").unwrap_err().contains("0 is not allowed"));
        assert!(parse_positive_list("--batch-sizes", "1,x").unwrap_err().contains("--batch-sizes"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("--x", "2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("--x", "1500ms").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("--x", "30").unwrap(), Duration::from_secs(30));
        assert!(parse_duration("--x", "soon").unwrap_err().contains("--x"));
    }
}
