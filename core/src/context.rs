//! User contexts (docs/design.md#consent-and-drift): what of a stored context reaches a model, and what is refused before
//! it is stored.
//!
//! - `render_value`: one slice value as it stands in the rendered `<user_context>` block, where no
//!   stored value can break a line or close the block.
//! - `detect_fields`: the sensitive-input gate (`MX007`) over the fields of one context together,
//!   so that a value split across fields, or wrapped in base64 or hex, is found.

use base64::Engine as _;

use crate::detect::{self, Set};

// ---------------------------------------------------------------------------------------------
// Rendering.

/// Characters that end a line somewhere (`\n`, `\v`, `\f`, `\r`, NEL, LINE SEPARATOR, PARAGRAPH
/// SEPARATOR). `render_value` turns them, with every other control character, into a space.
pub const LINE_SEPARATORS: [char; 7] = ['\n', '\u{0B}', '\u{0C}', '\r', '\u{85}', '\u{2028}', '\u{2029}'];

/// Characters that look like `<` and are rendered as `&lt;`: full-width and small less-than, single
/// angle quotation mark, CJK, deprecated technical and mathematical angle brackets, the modifier
/// arrowhead and the Canadian syllabics look-alike.
pub const LT_LOOKALIKES: [char; 8] =
    ['\u{FF1C}', '\u{FE64}', '\u{2039}', '\u{3008}', '\u{2329}', '\u{27E8}', '\u{02C2}', '\u{1438}'];

/// Characters that look like `>` and are rendered as `&gt;` (the counterparts of `LT_LOOKALIKES`).
pub const GT_LOOKALIKES: [char; 8] =
    ['\u{FF1E}', '\u{FE65}', '\u{203A}', '\u{3009}', '\u{232A}', '\u{27E9}', '\u{02C3}', '\u{1433}'];

/// Whether `c` breaks the line it is rendered on: a line separator or any other control character
/// (`char::is_control`: C0, DEL and C1).
pub fn breaks_line(c: char) -> bool {
    c.is_control() || LINE_SEPARATORS.contains(&c)
}

/// One slice value as rendered in the `<user_context>` block: `&`, `<` and `>` escaped (`&amp;`,
/// `&lt;`, `&gt;`), their look-alikes (`LT_LOOKALIKES`, `GT_LOOKALIKES`) folded to the escaped
/// ASCII forms, and each run of line separators and other control characters (`breaks_line`) as
/// one space. The result holds no `<`, `>`, look-alike, line separator or control character, so
/// the value stays on its line and cannot close the block.
pub fn render_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut in_break = false;
    for c in value.chars() {
        if breaks_line(c) {
            if !in_break {
                out.push(' ');
            }
            in_break = true;
            continue;
        }
        in_break = false;
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if LT_LOOKALIKES.contains(&c) => out.push_str("&lt;"),
            c if GT_LOOKALIKES.contains(&c) => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The sensitive-input gate over a context's fields.

/// Shortest token `detect_fields` decodes as base64 or hex.
pub const MIN_ENCODED_TOKEN: usize = 16;

/// Up to this many values every ordered pair is searched (a user context has 9 fields); beyond
/// it, neighbours only, so a long array costs linear time.
pub const MAX_PAIRED_FIELDS: usize = 16;

/// How many times decoded text is itself searched for encoded tokens (base64 of base64 ...).
pub const DECODE_DEPTH: usize = 2;

/// The detectors of `set` that match the values of one context's fields seen together: each value
/// alone, the concatenation of all values in the order given, every ordered pair of values
/// concatenated (no separator in either), and in each of these the decoded text of every base64
/// or hex token of `MIN_ENCODED_TOKEN` characters or more (`decoded_tokens`). A value split over
/// two fields, or wrapped in base64 or hex, is found; a matched value never leaves the function.
///
/// With one value this is that value and its decoded tokens: callers check fields one by one
/// with it (to name the field) and then all of them together.
pub fn detect_fields(values: &[&str], set: Set) -> Set {
    let mut found = Set::NONE;
    let mut scan = |text: &str| found = found.or(detect_text(text, set, DECODE_DEPTH));
    for v in values {
        scan(v);
    }
    if values.len() > 1 {
        scan(&values.concat());
    }
    if values.len() > MAX_PAIRED_FIELDS {
        // More values than a context has fields: neighbours only (linear, not quadratic).
        for w in values.windows(2) {
            scan(&[w[0], w[1]].concat());
            scan(&[w[1], w[0]].concat());
        }
    } else if values.len() > 2 {
        // (With two values the concatenation is one of the pairs.)
        for (i, a) in values.iter().enumerate() {
            for (j, b) in values.iter().enumerate() {
                if i != j {
                    scan(&[*a, *b].concat());
                }
            }
        }
    } else if values.len() == 2 {
        scan(&[values[1], values[0]].concat());
    }
    found
}

/// `detect::find` on `text` and on the decoded text of its encoded tokens, to `depth` levels.
fn detect_text(text: &str, set: Set, depth: usize) -> Set {
    let mut found = detect::find(text, set);
    if depth > 0 {
        for decoded in decoded_tokens(text) {
            found = found.or(detect_text(&decoded, set, depth - 1));
        }
    }
    found
}

fn is_hex_token(tok: &[u8]) -> bool {
    tok.len() >= MIN_ENCODED_TOKEN && tok.len() % 2 == 0 && tok.iter().all(u8::is_ascii_hexdigit)
}

/// The text encoded in `text`'s tokens of `MIN_ENCODED_TOKEN` characters or more: hex (an even
/// number of hex digits, `0x` allowed before them), standard base64 (`A–Z a–z 0–9 + /`) and
/// url-safe base64 (`A–Z a–z 0–9 - _`), padded with `=` or not. A token is a maximal run of one
/// alphabet, so base64 inside a URL path or after `key=` is a token of its own. Decoded bytes
/// count as text when they are UTF-8, or when at least three quarters of them are printable
/// ASCII (then read with the rest replaced); anything else (random bytes) is not text.
pub fn decoded_tokens(text: &str) -> Vec<String> {
    let t = text.as_bytes();
    let standard = |b: u8| b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
    let url_safe = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    // A run of letters and digits alone is a run of both alphabets: decoded once.
    let mut base64_runs = runs(t, standard);
    base64_runs.extend(runs(t, url_safe));
    base64_runs.sort_unstable();
    base64_runs.dedup();
    let mut out = Vec::new();
    for (start, end) in base64_runs {
        let tok = &t[start..end];
        let pad = t[end..].iter().take(2).take_while(|&&b| b == b'=').count();
        if tok.len() >= MIN_ENCODED_TOKEN {
            out.extend(decode_base64(tok, pad).as_deref().and_then(as_text));
        }
    }
    for (start, end) in runs(t, |b| b.is_ascii_alphanumeric()) {
        let mut tok = &t[start..end];
        if tok.len() > 2 && tok[0] == b'0' && matches!(tok[1], b'x' | b'X') {
            tok = &tok[2..];
        }
        if is_hex_token(tok) {
            out.extend(hex::decode(tok).ok().as_deref().and_then(as_text));
        }
    }
    out
}

/// Maximal runs of bytes `ok` accepts, as `(start, end)`.
fn runs(t: &[u8], ok: impl Fn(u8) -> bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if ok(t[i]) {
            let start = i;
            while i < t.len() && ok(t[i]) {
                i += 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

/// A base64 token (one alphabet, `pad` `=` after it) decoded, or None when it is not valid base64
/// (a length of 1 mod 4, padding that does not fit).
fn decode_base64(tok: &[u8], pad: usize) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
    use base64::engine::DecodePaddingMode;
    const CONFIG: GeneralPurposeConfig = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, CONFIG);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, CONFIG);
    if pad > 0 && (tok.len() + pad) % 4 != 0 {
        return None;
    }
    let engine = if tok.iter().any(|&b| b == b'-' || b == b'_') { &URL_SAFE } else { &STANDARD };
    engine.decode(tok).ok()
}

/// Decoded bytes as text (see `decoded_tokens`), or None.
fn as_text(bytes: &[u8]) -> Option<String> {
    if bytes.is_empty() {
        return None;
    }
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Some(s.to_string());
    }
    let printable = bytes.iter().filter(|&&b| (0x20..0x7f).contains(&b) || matches!(b, b'\t' | b'\n' | b'\r')).count();
    (printable * 4 >= bytes.len() * 3).then(|| String::from_utf8_lossy(bytes).into_owned())
}

#[cfg(test)]
mod tests;
