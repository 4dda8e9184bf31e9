//! The detectors of a person's identity (issue 46): a UK sort code with an account number, a
//! passport number after its keyword, and a name with a date of birth and a street address in
//! one text (a quasi-identifier: none of the three alone is personal data, together they single
//! a person out).
//!
//! There is no NER model: a *name* is recognised by its marks, and each rule says which. Every
//! rule is a bounded walk over the words near a keyword or a candidate, so each text is read a
//! fixed number of times. The text is already folded (`crate::fold`); these functions import
//! nothing of `detect` (its helpers are repeated here, a few lines each) so that the two files
//! depend one way.

/// `[A-Za-z0-9_]`, the detectors' word.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// A byte that continues a word of a name: a letter, a digit, `_`, or part of a non-ASCII
/// character (`José`, `Zoë`).
fn is_name_byte(b: u8) -> bool {
    is_word(b) || b >= 0x80
}

fn run_len(t: &[u8], from: usize, ok: impl Fn(u8) -> bool) -> usize {
    t[from.min(t.len())..].iter().take_while(|&&b| ok(b)).count()
}

/// The words of `t[from..to]` (maximal runs of `[A-Za-z0-9_]`), as `(start, end)`.
fn words(t: &[u8], from: usize, to: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    let to = to.min(t.len());
    let mut i = from.min(to);
    // A run that began before `from` is not a word of the range.
    while i > 0 && i < to && is_word(t[i - 1]) && is_word(t[i]) {
        i += 1;
    }
    std::iter::from_fn(move || {
        while i < to && !is_word(t[i]) {
            i += 1;
        }
        if i >= to {
            return None;
        }
        let start = i;
        i += run_len(t, i, is_word);
        Some((start, i))
    })
}

/// Whether one of `keys` (lower case) is a whole word of `t[from..to]`, case-insensitively.
fn word_in(t: &[u8], from: usize, to: usize, keys: &[&str]) -> bool {
    words(t, from, to).any(|(s, e)| keys.iter().any(|k| t[s..e].eq_ignore_ascii_case(k.as_bytes())))
}

/// Starts of the whole words equal (case-insensitively) to `key`.
fn keyword_at<'t>(t: &'t [u8], key: &'t str) -> impl Iterator<Item = usize> + 't {
    let k = key.as_bytes();
    let first = [k[0], k[0].to_ascii_uppercase()];
    memchr::memchr2_iter(first[0], first[1], t).filter(move |&i| {
        i + k.len() <= t.len()
            && t[i..i + k.len()].eq_ignore_ascii_case(k)
            && (i == 0 || !is_word(t[i - 1]))
            && (i + k.len() == t.len() || !is_word(t[i + k.len()]))
    })
}

/// The number of the digits of a run of ASCII digits.
fn number(d: &[u8]) -> u32 {
    d.iter().fold(0u32, |a, b| a.saturating_mul(10).saturating_add(u32::from(b - b'0')))
}

// ---------------------------------------------------------------------------------------------
// UK sort code and account number.

/// How far (bytes) the account number may stand from the sort code, either side.
const ACCOUNT_WINDOW: usize = 64;
/// How far (bytes) a keyword may stand from what it marks.
const NEAR: usize = 48;

pub const SORT_CODE_WORDS: &[&str] = &["sort code", "sortcode", "account", "acct", "a/c"];
const ACCOUNT_WORDS: &[&str] = &["account", "acct", "acc"];

/// A sort code `NN-NN-NN` (or `NN NN NN`) at `i`: its end, when it is whole (not a part of a
/// longer number joined by a separator) and not `00-00-00`.
fn sort_code_at(t: &[u8], i: usize) -> Option<usize> {
    let two = |j: usize| j + 2 <= t.len() && t[j].is_ascii_digit() && t[j + 1].is_ascii_digit();
    if !(two(i) && (i == 0 || !is_word(t[i - 1]))) {
        return None;
    }
    let sep = *t.get(i + 2)?;
    if !matches!(sep, b'-' | b' ') || !two(i + 3) || t.get(i + 5) != Some(&sep) || !two(i + 6) {
        return None;
    }
    let end = i + 8;
    if end < t.len() && is_word(t[end]) {
        return None;
    }
    // `1-20-00-00`, `20-00-00-12`: part of another number.
    let joined_before = i >= 2 && matches!(t[i - 1], b'-' | b'.' | b'/') && t[i - 2].is_ascii_digit();
    let joined_after = end + 1 < t.len() && matches!(t[end], b'-' | b'.' | b'/') && t[end + 1].is_ascii_digit();
    let zero = t[i..end].iter().all(|&b| !b.is_ascii_digit() || b == b'0');
    (!joined_before && !joined_after && !zero).then_some(end)
}

/// The words `sort code` (or `sort-code`) or `sortcode` within `NEAR` bytes of `start..end`.
fn sort_code_word_near(t: &[u8], start: usize, end: usize) -> bool {
    let lo = start.saturating_sub(NEAR);
    let hi = (end + NEAR).min(t.len());
    words(t, lo, hi).any(|(s, e)| {
        let w = &t[s..e];
        w.eq_ignore_ascii_case(b"sortcode")
            || (w.eq_ignore_ascii_case(b"sort")
                && e + 5 <= t.len()
                && matches!(t[e], b' ' | b'-')
                && t[e + 1..e + 5].eq_ignore_ascii_case(b"code")
                && (e + 5 == t.len() || !is_word(t[e + 5])))
    })
}

/// An account-number word (`account`, `acct`, `acc`, `a/c`) within `NEAR` bytes of `start..end`.
fn account_word_near(t: &[u8], start: usize, end: usize) -> bool {
    let lo = start.saturating_sub(NEAR);
    let hi = (end + NEAR).min(t.len());
    word_in(t, lo, hi, ACCOUNT_WORDS)
        || t[lo..hi].windows(3).any(|w| w.eq_ignore_ascii_case(b"a/c"))
}

/// An 8-digit account number in `t[from..to]`: a whole run of eight digits, not joined to other
/// digits by a separator, not `00000000`. Its `(start, end)`.
fn account_numbers(t: &[u8], from: usize, to: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    words(t, from, to).filter(move |&(s, e)| {
        let joined_before = s >= 2 && matches!(t[s - 1], b'-' | b'.' | b'/') && t[s - 2].is_ascii_digit();
        let joined_after = e + 1 < t.len() && matches!(t[e], b'-' | b'.' | b'/') && t[e + 1].is_ascii_digit();
        e - s == 8 && t[s..e].iter().all(u8::is_ascii_digit) && t[s..e].iter().any(|&b| b != b'0') && !joined_before && !joined_after
    })
}

/// A UK sort code with its words near it and an 8-digit account number within
/// `ACCOUNT_WINDOW` bytes, either marked by an account word or written right after the code
/// (`20-00-00 12345678`, `20-00-00 / 12345678`).
pub fn sort_code_account(t: &[u8]) -> bool {
    let mut i = 0;
    while i + 8 <= t.len() {
        let Some(end) = sort_code_at(t, i) else {
            i += 1;
            continue;
        };
        if sort_code_word_near(t, i, end) {
            let lo = i.saturating_sub(ACCOUNT_WINDOW);
            let hi = (end + ACCOUNT_WINDOW).min(t.len());
            let found = account_numbers(t, lo, hi).any(|(s, e)| {
                let right_after = s >= end && t[end..s].iter().all(|&b| matches!(b, b' ' | b',' | b'/' | b';')) && s - end <= 3;
                right_after || account_word_near(t, s, e)
            });
            if found {
                return true;
            }
        }
        i = end;
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Passport numbers.

pub const PASSPORT_WORDS: &[&str] = &["passport"];
/// Words that may stand between the keyword and the number (`passport no.`, `passport number is`,
/// `passport ID`), at most three of them, or an issuing state's three-letter code (`GBR`).
const PASSPORT_FILLERS: &[&str] = &["no", "nr", "num", "number", "is", "was", "id", "ref"];

/// The German passport alphabet: digits and the consonants that cannot be mistaken for digits.
fn german_char(b: u8) -> bool {
    b.is_ascii_digit() || b"CFGHJKLMNPRTVWXYZ".contains(&b)
}

/// Whether a word has a national passport number's shape (letters upper case): 9 digits (UK, US
/// and many others); a letter and 8 digits (US); a letter and 7 digits (India, Australia); two
/// letters and 7 digits (Italy, Ireland, Japan, Australia); two letters and 6 digits (Canada);
/// three letters and 6 digits (Spain); 2 digits, 2 letters, 5 digits (France); `C`, `F`, `G`,
/// `H`, `J` or `K` and 8 characters of the German alphabet, 3 of them digits at least (Germany).
pub fn passport_shape(w: &[u8]) -> bool {
    let letters = w.iter().take_while(|b| b.is_ascii_uppercase()).count();
    let digits_after = w.len() - letters;
    let all_digits_after = w[letters..].iter().all(u8::is_ascii_digit);
    let by_prefix = all_digits_after
        && matches!((letters, digits_after), (0, 9) | (1, 8) | (1, 7) | (2, 7) | (2, 6) | (3, 6));
    let france = w.len() == 9
        && w[..2].iter().all(u8::is_ascii_digit)
        && w[2..4].iter().all(u8::is_ascii_uppercase)
        && w[4..].iter().all(u8::is_ascii_digit);
    let germany = w.len() == 9
        && b"CFGHJK".contains(&w[0])
        && w[1..].iter().all(|&b| german_char(b))
        && w.iter().filter(|b| b.is_ascii_digit()).count() >= 3;
    by_prefix || france || germany
}

/// The word `passport` and, as the next word after at most three of `no`, `nr`, `num`,
/// `number`, `is`, `was`, `id`, `ref` or a three-letter state code (each after at most three
/// bytes of spaces or `:`, `.`, `#`, `=`, `(`), a word of a national passport number's shape:
/// `passport no. 123456789`, `Passport number: C01X00T47`, `passport GBR 123456789`. A word
/// joined to the next by `-`, `.` or `/` and a letter or digit (a date, a version) is no number.
pub fn passport_number(t: &[u8]) -> bool {
    keyword_at(t, "passport").any(|k| {
        let mut j = k + "passport".len();
        for _ in 0..4 {
            let gap = run_len(t, j, |b| matches!(b, b' ' | b':' | b'.' | b'#' | b'=' | b'('));
            if gap == 0 || gap > 3 {
                return false;
            }
            let s = j + gap;
            let e = s + run_len(t, s, is_word);
            if e == s {
                return false;
            }
            let w = &t[s..e];
            let joined = e + 1 < t.len() && matches!(t[e], b'-' | b'.' | b'/') && t[e + 1].is_ascii_alphanumeric();
            if passport_shape(w) {
                return !joined;
            }
            let filler = PASSPORT_FILLERS.iter().any(|f| w.eq_ignore_ascii_case(f.as_bytes()))
                || (w.len() == 3 && w.iter().all(u8::is_ascii_uppercase));
            if !filler {
                return false;
            }
            j = e;
        }
        false
    })
}

// ---------------------------------------------------------------------------------------------
// Name + date of birth + street address.

pub const BIRTH_WORDS: &[&str] = &["born", "dob", "d.o.b", "birth", "birthdate"];
/// A date of birth starts within this many bytes after its keyword (`DOB: `, `born on the `) ...
const DOB_AFTER: usize = 32;
/// ... or ends within this many before it (`14/03/1982 (DOB)`), with only separators between.
const DOB_BEFORE: usize = 4;

/// Where the birth keywords stand: `(start, end)` of `born`, `dob`, `birth`, `birthdate` and
/// `d.o.b` (`date of birth` and `birth date` contain `birth`).
fn birth_keywords(t: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let plain = ["born", "dob", "birth", "birthdate"]
        .into_iter()
        .flat_map(move |k| keyword_at(t, k).map(move |s| (s, s + k.len())));
    let dotted = keyword_at(t, "d").filter_map(move |s| {
        (s + 5 <= t.len() && t[s + 1..s + 5].eq_ignore_ascii_case(b".o.b") && (s + 5 == t.len() || !is_word(t[s + 5])))
            .then_some((s, s + 5))
    });
    plain.chain(dotted)
}

const MONTHS: [&str; 12] =
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"];

/// The month of a month name, full or its first three letters (`Sept` too), any case.
fn month_of(w: &[u8]) -> Option<u32> {
    MONTHS.iter().position(|m| {
        let m = m.as_bytes();
        w.eq_ignore_ascii_case(m) || (w.len() == 3 && w.eq_ignore_ascii_case(&m[..3])) || (w.eq_ignore_ascii_case(b"sept") && m[0] == b's')
    })
    .map(|p| p as u32 + 1)
}

/// Whether `day`/`month`/`year` is a calendar date of a person's birth: a 4-digit year from 1900
/// to 2099 (a 2-digit one is taken as written), the day within its month (29 February in leap years).
pub fn birth_date_valid(year: u32, month: u32, day: u32) -> bool {
    if !(year < 100 || (1900..=2099).contains(&year)) || !(1..=12).contains(&month) || day == 0 {
        return false;
    }
    let leap = if year < 100 { year % 4 == 0 } else { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) };
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    day <= days
}

/// A date starting at word `s..e`: its end. Numeric (`1982-03-14`, `14/03/1982`, `03/14/1982`,
/// `14.03.1982`, `14/03/82`: one separator throughout, day and month either way round) or with a
/// month name (`14 March 1982`, `14th Mar 1982`, `March 14, 1982`).
fn date_at(t: &[u8], s: usize, e: usize) -> Option<usize> {
    let w = &t[s..e];
    let digits = |a: usize, b: usize| b > a && t[a..b].iter().all(u8::is_ascii_digit);
    if digits(s, e) {
        // Numeric: three digit groups joined by one separator, used twice.
        let sep = *t.get(e)?;
        if matches!(sep, b'-' | b'/' | b'.') {
            let g2 = e + 1 + run_len(t, e + 1, |b| b.is_ascii_digit());
            if g2 > e + 1 && t.get(g2) == Some(&sep) {
                let g3 = g2 + 1 + run_len(t, g2 + 1, |b| b.is_ascii_digit());
                if g3 > g2 + 1 && !(g3 < t.len() && (is_word(t[g3]) || (matches!(t[g3], b'-' | b'/' | b'.') && g3 + 1 < t.len() && t[g3 + 1].is_ascii_digit()))) {
                    let (a, b, c) = (&t[s..e], &t[e + 1..g2], &t[g2 + 1..g3]);
                    let (na, nb, nc) = (number(a), number(b), number(c));
                    let ok = match (a.len(), b.len(), c.len()) {
                        (4, 1..=2, 1..=2) => birth_date_valid(na, nb, nc),
                        (1..=2, 1..=2, 4) | (1..=2, 1..=2, 2) => birth_date_valid(nc, nb, na) || birth_date_valid(nc, na, nb),
                        _ => false,
                    };
                    return ok.then_some(g3);
                }
            }
            return None;
        }
        // `14 March 1982`, `14th of March 1982` handled below through the suffix.
    }
    // Day first: `14`, `14th`, then the month name, then the year.
    let day_len = run_len(t, s, |b| b.is_ascii_digit());
    if (1..=2).contains(&day_len) && (e == s + day_len || (e == s + day_len + 2 && [b"st", b"nd", b"rd", b"th"].iter().any(|x| t[s + day_len..e].eq_ignore_ascii_case(*x)))) {
        let day = number(&t[s..s + day_len]);
        let gap_ok = |a: usize, b: usize| b >= a && b - a <= 3 && t[a..b].iter().all(|&c| matches!(c, b' ' | b',' | b'.'));
        let mut ws = words(t, e, (e + 24).min(t.len()));
        let (mut ms, mut me) = ws.next()?;
        if !gap_ok(e, ms) {
            return None;
        }
        if t[ms..me].eq_ignore_ascii_case(b"of") {
            let (a, b) = ws.next()?;
            if !gap_ok(me, a) {
                return None;
            }
            (ms, me) = (a, b);
        }
        let month = month_of(&t[ms..me])?;
        let (ys, ye) = ws.next()?;
        if gap_ok(me, ys) && ye - ys == 4 && digits(ys, ye) && birth_date_valid(number(&t[ys..ye]), month, day) {
            return Some(ye);
        }
        return None;
    }
    // Month first: `March 14, 1982`.
    let month = month_of(w)?;
    let mut ws = words(t, e, (e + 16).min(t.len()));
    let (ds, de) = ws.next()?;
    let dl = run_len(t, ds, |b| b.is_ascii_digit());
    if !(1..=2).contains(&dl) || !(de == ds + dl || (de == ds + dl + 2 && [b"st", b"nd", b"rd", b"th"].iter().any(|x| t[ds + dl..de].eq_ignore_ascii_case(*x)))) {
        return None;
    }
    let (ys, ye) = ws.next()?;
    let gap_ok = |a: usize, b: usize| b >= a && b - a <= 3 && t[a..b].iter().all(|&c| matches!(c, b' ' | b',' | b'.'));
    (gap_ok(e, ds) && gap_ok(de, ys) && ye - ys == 4 && digits(ys, ye) && birth_date_valid(number(&t[ys..ye]), month, number(&t[ds..ds + dl])))
        .then_some(ye)
}

/// Words that may stand between a birth keyword and the date (`born on the 14th`, `date of birth
/// is`, `born in Leeds on`), besides at most two capitalised words (a place).
const DOB_FILLERS: &[&str] = &["on", "the", "is", "was", "in", "at", "of", "date"];

/// A date right after a birth keyword ending at `ke`: after separators (` `, `,`, `:`, `-`, `(`,
/// `=`, `.`) and at most four filler words or places, starting within `DOB_AFTER` bytes.
fn dob_after(t: &[u8], ke: usize) -> bool {
    let mut j = ke;
    let mut places = 0;
    for _ in 0..5 {
        let gap = run_len(t, j, |b| matches!(b, b' ' | b',' | b':' | b'-' | b'(' | b'=' | b'.'));
        let s = j + gap;
        let e = s + run_len(t, s, is_word);
        if gap == 0 || gap > 4 || e == s || s - ke > DOB_AFTER {
            return false;
        }
        if date_at(t, s, e).is_some() {
            return true;
        }
        let filler = DOB_FILLERS.iter().any(|f| t[s..e].eq_ignore_ascii_case(f.as_bytes()));
        let place = cap_word(t, s) == Some(e) && places < 2;
        if !(filler || place) {
            return false;
        }
        places += usize::from(!filler);
        j = e;
    }
    false
}

/// A date ending right before a birth keyword starting at `ks` (`14/03/1982 (DOB)`): at most
/// `DOB_BEFORE` bytes of separators between.
fn dob_before(t: &[u8], ks: usize) -> bool {
    let gap = t[..ks].iter().rev().take_while(|&&b| matches!(b, b' ' | b',' | b':' | b'-' | b'(')).count();
    let end = ks - gap;
    gap > 0 && gap <= DOB_BEFORE && words(t, end.saturating_sub(24), end).any(|(s, e)| date_at(t, s, e) == Some(end))
}

/// A date of birth: a valid date right after a birth keyword (`born 14/03/1982`, `DOB: 1982-03-14`,
/// `born in Leeds on 14 March 1982`) or right before one (`14/03/1982 (DOB)`).
pub fn date_of_birth(t: &[u8]) -> bool {
    birth_keywords(t).any(|(ks, ke)| dob_after(t, ke) || dob_before(t, ks))
}

/// A capitalised word at `i` (`Jane`, `O'Brien`, `Smith-Jones`, `McDonald`, `José`): an ASCII
/// capital, lower-case letters (non-ASCII letters count as lower case), and further parts each
/// an optional capital then lower-case letters, joined directly or by `'` or `-`. Its end.
fn cap_word(t: &[u8], i: usize) -> Option<usize> {
    if i >= t.len() || !t[i].is_ascii_uppercase() || (i > 0 && is_name_byte(t[i - 1])) {
        return None;
    }
    let lower = |b: u8| b.is_ascii_lowercase() || b >= 0x80;
    let mut j = i + 1;
    let l = run_len(t, j, lower);
    if l == 0 {
        return None;
    }
    j += l;
    loop {
        let k = if j < t.len() && matches!(t[j], b'\'' | b'-') { j + 1 } else { j };
        let k2 = if k < t.len() && t[k].is_ascii_uppercase() { k + 1 } else { k };
        let l = run_len(t, k2, lower);
        if l == 0 || (k == j && k2 == j) {
            break;
        }
        j = k2 + l;
    }
    (j == t.len() || !is_name_byte(t[j])).then_some(j)
}

const TITLES: &[&str] = &["mr", "mrs", "ms", "miss", "mx", "dr", "prof", "sir", "dame", "lady", "lord"];

/// A title (`Mr`, `Mrs`, `Ms`, `Miss`, `Mx`, `Dr`, `Prof`, `Sir`, `Dame`, `Lady`, `Lord`; a
/// capital first, then any case, an optional `.`), a space, up to two initials (`J.`), and a
/// capitalised word: `Mr Smith`, `Dr. J. Smith`.
fn titled_name(t: &[u8]) -> bool {
    words(t, 0, t.len()).any(|(s, e)| {
        if !t[s].is_ascii_uppercase() || !TITLES.iter().any(|k| t[s..e].eq_ignore_ascii_case(k.as_bytes())) {
            return false;
        }
        let mut j = e + usize::from(t.get(e) == Some(&b'.'));
        for _ in 0..3 {
            if t.get(j) != Some(&b' ') {
                return false;
            }
            j += 1;
            if cap_word(t, j).is_some() {
                return true;
            }
            // An initial: a capital alone, or with a dot.
            if j < t.len() && t[j].is_ascii_uppercase() && !t.get(j + 1).is_some_and(|&b| is_name_byte(b)) {
                j += 1 + usize::from(t.get(j + 1) == Some(&b'.'));
            } else {
                return false;
            }
        }
        false
    })
}

/// `name` or `named` (any case), then up to 6 bytes of `:`, `=`, quotes, spaces or the word `is`,
/// then two capitalised words joined by one space: `name: Jane Smith`, `Name is Jane Smith`.
fn keyword_name(t: &[u8]) -> bool {
    keyword_at(t, "name").map(|s| s + 4).chain(keyword_at(t, "named").map(|s| s + 5)).any(|after| {
        let mut j = after;
        let limit = after + 6;
        while j < t.len() && j < limit {
            if matches!(t[j], b' ' | b':' | b'=' | b'"' | b'\'') {
                j += 1;
            } else if t[j..].len() >= 3 && t[j..j + 2].eq_ignore_ascii_case(b"is") && t[j + 2] == b' ' && !is_word(t[j - 1]) {
                j += 2;
            } else {
                break;
            }
        }
        j > after && cap_word(t, j).is_some_and(|e1| t.get(e1) == Some(&b' ') && cap_word(t, e1 + 1).is_some())
    })
}

/// Two to four capitalised words joined by single spaces, followed within 16 bytes by a birth
/// keyword with nothing but spaces, `,`, `(`, `-`, `:` and the words `was`, `is`, `who` between:
/// `Jane Smith, born …`, `Jane Ann Smith (DOB …)`, `Jane Smith, who was born …`.
fn name_before_birth(t: &[u8]) -> bool {
    birth_keywords(t).any(|(ks, _)| {
        // Walk back from the keyword over the allowed gap.
        let mut j = ks;
        let floor = ks.saturating_sub(16);
        loop {
            while j > floor && matches!(t[j - 1], b' ' | b',' | b'(' | b'-' | b':') {
                j -= 1;
            }
            let wl = t[..j].iter().rev().take_while(|&&b| is_word(b)).count();
            let w = &t[j - wl..j];
            if wl > 0 && j - wl >= floor && [&b"was"[..], b"is", b"who"].iter().any(|k| w.eq_ignore_ascii_case(k)) {
                j -= wl;
                continue;
            }
            break;
        }
        // Capitalised words ending at j, joined by single spaces.
        let mut count = 0;
        let mut end = j;
        while count < 4 {
            let start = end - t[..end].iter().rev().take_while(|&&b| is_name_byte(b) || matches!(b, b'\'' | b'-')).count();
            if start == end || cap_word(t, start) != Some(end) {
                break;
            }
            count += 1;
            if start >= 2 && t[start - 1] == b' ' && is_name_byte(t[start - 2]) {
                end = start - 1;
            } else {
                break;
            }
        }
        count >= 2
    })
}

/// A person's name, by one of its marks: a title, the word `name`, or a birth keyword right after
/// capitalised words (see each rule).
pub fn person_name(t: &[u8]) -> bool {
    titled_name(t) || keyword_name(t) || name_before_birth(t)
}

const STREET_SUFFIXES: &[&str] = &[
    "Street", "St", "Road", "Rd", "Avenue", "Ave", "Lane", "Ln", "Drive", "Dr", "Close", "Court", "Ct", "Place", "Pl",
    "Crescent", "Cres", "Terrace", "Way", "Boulevard", "Blvd", "Gardens", "Grove", "Square", "Sq", "Row", "Mews", "Hill",
    "Parade", "Walk", "Highway", "Hwy", "Circle", "Parkway", "Pkwy",
];

/// A street line: a house number (1–4 digits and an optional letter: `12`, `221B`) as a whole
/// word, then two to four capitalised words joined by single spaces of which one after the first
/// is a street suffix (`Street`, `St`, `Road`, `Avenue`, `Lane`, `Drive`, `Close`, …, as written
/// with a capital): `12 Acacia Avenue`, `221B Baker Street`, `1600 Pennsylvania Avenue`.
fn street_line(t: &[u8]) -> bool {
    words(t, 0, t.len()).any(|(s, e)| {
        let d = run_len(t, s, |b| b.is_ascii_digit());
        let number = (1..=4).contains(&d) && (e == s + d || (e == s + d + 1 && t[e - 1].is_ascii_alphabetic()));
        if !number || (s >= 2 && matches!(t[s - 1], b'-' | b'.' | b'/' | b':' | b',') && t[s - 2].is_ascii_digit()) || t.get(e) != Some(&b' ') {
            return false;
        }
        let mut j = e + 1;
        for k in 0..4 {
            let Some(we) = cap_word(t, j) else { return false };
            if k >= 1 && STREET_SUFFIXES.iter().any(|x| t[j..we] == *x.as_bytes()) {
                return true;
            }
            if t.get(we) != Some(&b' ') {
                return false;
            }
            j = we + 1;
        }
        false
    })
}

/// A UK postcode as a whole: outward code (1–2 letters, not starting with Q, V or X; a digit; an
/// optional letter or digit), one space, inward code (a digit and two letters other than C, I,
/// K, M, O, V), upper case: `LS1 4AB`, `SW1A 1AA`.
pub fn uk_postcode(t: &[u8]) -> bool {
    let inward = |j: usize| {
        j + 3 <= t.len()
            && t[j].is_ascii_digit()
            && t[j + 1..j + 3].iter().all(|&b| b.is_ascii_uppercase() && !b"CIKMOV".contains(&b))
            && (j + 3 == t.len() || !is_word(t[j + 3]))
    };
    words(t, 0, t.len()).any(|(s, e)| {
        let w = &t[s..e];
        let letters = w.iter().take_while(|b| b.is_ascii_uppercase()).count();
        let outward = (1..=2).contains(&letters)
            && !b"QVX".contains(&w[0])
            && w.len() > letters
            && w[letters].is_ascii_digit()
            && (w.len() == letters + 1 || (w.len() == letters + 2 && (w[letters + 1].is_ascii_digit() || w[letters + 1].is_ascii_uppercase())));
        outward && t.get(e) == Some(&b' ') && inward(e + 1)
    })
}

/// A street address: a street line or a UK postcode.
pub fn street_address(t: &[u8]) -> bool {
    street_line(t) || uk_postcode(t)
}

/// A person's name, a date of birth and a street address in one text.
pub fn name_dob_address(t: &[u8]) -> bool {
    date_of_birth(t) && street_address(t) && person_name(t)
}
