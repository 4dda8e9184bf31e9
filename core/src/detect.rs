//! Validated detectors of personal data and secrets (docs/design.md#classification).
//!
//! Each detector finds candidates by shape, then validates them the way the format itself does
//! (Luhn and issuer ranges, mod-97, the ABA checksum, Base58Check, bech32/bech32m, EIP-55, the
//! CRC32 of GitHub tokens, a JWT header that decodes to JSON), so look-alikes such as git SHAs,
//! UUIDs, dates, order numbers and version strings do not fire. Detectors report only *that* they
//! matched, by name: a matched value never leaves this module.
//!
//! The text they see is already folded (`crate::fold`). `classify` runs them behind the gates its
//! one-pass scan computes (`Gates`); `find` runs them on any text, for other rules (the consent
//! layer's sensitive-input gate) that call them by name.
//!
//! The detectors of a person's identity (sort code and account, passport, name with date of
//! birth and address) are in `detect/identity.rs`.
//!
//! This file is long because it holds every validated detector (one short validator each,
//! beside the shape that finds its candidates); splitting them apart would split each pair.

use base64::Engine as _;
use regex::bytes::Regex;
use sha3::{Digest, Keccak256};
use std::sync::LazyLock;

use crate::tier::Tier;

/// Every detector, in the order `classify` tries them within a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Detector {
    CardNumber,
    Ssn,
    Iban,
    AbaRouting,
    Email,
    Phone,
    BitcoinAddress,
    EthereumAddress,
    SortCodeAccount,
    PassportNumber,
    NameDobAddress,
    PemPrivateKey,
    AwsAccessKey,
    Jwt,
    GithubToken,
    SlackToken,
    StripeKey,
    GoogleApiKey,
    UrlCredentials,
}

impl Detector {
    pub const ALL: [Detector; 19] = [
        Detector::CardNumber,
        Detector::Ssn,
        Detector::Iban,
        Detector::AbaRouting,
        Detector::Email,
        Detector::Phone,
        Detector::BitcoinAddress,
        Detector::EthereumAddress,
        Detector::SortCodeAccount,
        Detector::PassportNumber,
        Detector::NameDobAddress,
        Detector::PemPrivateKey,
        Detector::AwsAccessKey,
        Detector::Jwt,
        Detector::GithubToken,
        Detector::SlackToken,
        Detector::StripeKey,
        Detector::GoogleApiKey,
        Detector::UrlCredentials,
    ];

    /// The 0.1.0 set (`memory.classify_detectors = first_generation`).
    pub const FIRST_GENERATION: [Detector; 5] =
        [Detector::CardNumber, Detector::Ssn, Detector::PemPrivateKey, Detector::AwsAccessKey, Detector::Jwt];

    /// Stable name (`classify_explain.detectors`, `memory.detect`, the MX007 message).
    pub fn name(self) -> &'static str {
        match self {
            Detector::CardNumber => "card_number",
            Detector::Ssn => "ssn",
            Detector::Iban => "iban",
            Detector::AbaRouting => "aba_routing",
            Detector::Email => "email",
            Detector::Phone => "phone",
            Detector::BitcoinAddress => "bitcoin_address",
            Detector::EthereumAddress => "ethereum_address",
            Detector::SortCodeAccount => "sort_code_account",
            Detector::PassportNumber => "passport_number",
            Detector::NameDobAddress => "name_dob_address",
            Detector::PemPrivateKey => "pem_private_key",
            Detector::AwsAccessKey => "aws_access_key",
            Detector::Jwt => "jwt",
            Detector::GithubToken => "github_token",
            Detector::SlackToken => "slack_token",
            Detector::StripeKey => "stripe_key",
            Detector::GoogleApiKey => "google_api_key",
            Detector::UrlCredentials => "url_credentials",
        }
    }

    pub fn parse(name: &str) -> Option<Detector> {
        Detector::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The tier a match raises content to.
    pub fn tier(self) -> Tier {
        match self {
            Detector::CardNumber
            | Detector::Ssn
            | Detector::Iban
            | Detector::AbaRouting
            | Detector::Email
            | Detector::Phone
            | Detector::BitcoinAddress
            | Detector::EthereumAddress
            | Detector::SortCodeAccount
            | Detector::PassportNumber
            | Detector::NameDobAddress => Tier::Restricted,
            _ => Tier::Confidential,
        }
    }

    /// What validates a candidate (the detector table of docs/reference.md).
    pub fn validation(self) -> &'static str {
        match self {
            Detector::CardNumber => "13–19 digits (spaces or dashes allowed), Luhn checksum, issuer range and length (Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay, Maestro, Mir)",
            Detector::Ssn => "NNN-NN-NNNN with an issuable area (not 000, 666, 900–999), group (not 00) and serial (not 0000)",
            Detector::Iban => "country code, ISO 13616 length of that country, mod-97 = 1; compact or in groups of four",
            Detector::AbaRouting => "9 digits, ABA checksum (3·7·1 weights), Federal Reserve prefix (00–12, 21–32, 61–72, 80), a context word nearby",
            Detector::Email => "local part and a domain of at least two labels with an alphabetic TLD (not a `user:pass@` URL or a `git@host:path` remote)",
            Detector::Phone => "`+` and an assigned country calling code, 8–15 digits (E.164); or 7–15 digits in phone shape (NANP area and exchange codes checked) with a context word nearby",
            Detector::BitcoinAddress => "Base58Check (version 0x00 or 0x05, double-SHA-256 checksum) or segwit bech32/bech32m with HRP `bc`",
            Detector::EthereumAddress => "`0x` + 40 hex digits: mixed case must pass the EIP-55 (Keccak-256) checksum; single-case only with a context word nearby",
            Detector::SortCodeAccount => "UK sort code `NN-NN-NN` (or `NN NN NN`, not `00-00-00`, not part of a longer number) with the words `sort code` (`sortcode`) nearby, and an 8-digit account number (not `00000000`) within 64 bytes, marked by `account`/`acct`/`acc`/`a/c` nearby or written right after the code; no modulus check (its weight table is VocaLink's, per bank)",
            Detector::PassportNumber => "the word `passport`, then (after at most three of `no`, `number`, `nr`, `num`, `is`, `was`, `id`, `ref` or a 3-letter state code) a word of a national format, letters upper case: 9 digits (UK, US); a letter and 8 or 7 digits (US, India, Australia); 2 letters and 7 or 6 digits (Italy, Ireland, Japan, Canada); 3 letters and 6 digits (Spain); 2 digits, 2 letters, 5 digits (France); `C`/`F`/`G`/`H`/`J`/`K` and 8 of the German alphabet with 3+ digits (Germany); not joined to more by `-`, `.` or `/`",
            Detector::NameDobAddress => "all three in one text: a name (a title such as `Mr`/`Ms`/`Dr` and a capitalised word; `name:` and two capitalised words; or two to four capitalised words right before a birth keyword), a date of birth (a calendar-valid date, years 1900–2099, numeric or with a month name, right after `born`/`DOB`/`D.O.B`/`birth`/`birthdate` with only fillers such as `on`, `the`, `in <Place>` between, or right before one) and a street address (house number, capitalised street name and a suffix such as `Street`/`Road`/`Avenue`; or a UK postcode)",
            Detector::PemPrivateKey => "`-----BEGIN … PRIVATE KEY-----` header",
            Detector::AwsAccessKey => "`AKIA`/`ASIA` + 16 base32 characters (A–Z, 2–7)",
            Detector::Jwt => "three base64url segments whose header decodes to a JSON object with `alg`",
            Detector::GithubToken => "`ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` + 30 characters + their CRC32 in base62; `github_pat_` + 22 + `_` + 59 characters",
            Detector::SlackToken => "`xox[abposr]-` + at least two dash-separated segments, 15+ characters",
            Detector::StripeKey => "`sk_live_`/`rk_live_` + 24–99 alphanumerics",
            Detector::GoogleApiKey => "`AIza` + exactly 35 characters of `[0-9A-Za-z_-]`",
            Detector::UrlCredentials => "`scheme://user:password@host` with a non-empty password and host",
        }
    }

    /// Words of which one must stand near a candidate (case-insensitive), where the shape alone is
    /// too common.
    pub fn context_words(self) -> &'static [&'static str] {
        match self {
            Detector::AbaRouting => ROUTING_WORDS,
            Detector::Phone => PHONE_WORDS,
            Detector::EthereumAddress => WALLET_WORDS,
            Detector::SortCodeAccount => identity::SORT_CODE_WORDS,
            Detector::PassportNumber => identity::PASSPORT_WORDS,
            Detector::NameDobAddress => identity::BIRTH_WORDS,
            _ => &[],
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

pub const PHONE_WORDS: &[&str] = &["phone", "phones", "telephone", "tel", "mobile", "cell", "cellphone"];
pub const ROUTING_WORDS: &[&str] = &["routing", "aba", "rtn", "transit"];
pub const WALLET_WORDS: &[&str] = &["wallet", "address", "eth", "ethereum", "ether"];

/// How many bytes either side of a candidate a context word may stand.
pub const CONTEXT_WINDOW: usize = 48;

/// A set of detectors (the `memory.classify_detectors` setting, or what matched).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Set(u32);

impl Set {
    pub const NONE: Set = Set(0);

    pub fn all() -> Set {
        Set::of(&Detector::ALL)
    }

    pub fn first_generation() -> Set {
        Set::of(&Detector::FIRST_GENERATION)
    }

    pub fn of(ds: &[Detector]) -> Set {
        Set(ds.iter().fold(0, |a, d| a | d.bit()))
    }

    pub fn contains(self, d: Detector) -> bool {
        self.0 & d.bit() != 0
    }

    pub fn insert(&mut self, d: Detector) {
        self.0 |= d.bit();
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Members in `Detector::ALL` order.
    pub fn iter(self) -> impl Iterator<Item = Detector> {
        Detector::ALL.into_iter().filter(move |d| self.contains(*d))
    }

    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Detector::name).collect()
    }
}

impl From<bool> for Set {
    fn from(on: bool) -> Set {
        if on {
            Set::all()
        } else {
            Set::NONE
        }
    }
}

/// What the one-pass scan saw that a detector needs before it can match (each flag is necessary
/// for its detectors, never sufficient). Without a scan (`find`, the reference path), every
/// detector runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gates {
    /// Most digits in one chain of all-digit words joined by single spaces or dashes.
    pub digit_chain: usize,
    /// A chain of at least nine digits with a dash (the SSN shape).
    pub dashed_nine: bool,
    /// Most digits in one chain of all-digit words joined by a single space, dash or dot, or by a
    /// `)` (the national phone shapes; their context word is the validator's to find).
    pub phone_chain: usize,
    /// An all-digit word of exactly nine digits (ABA).
    pub nine_digits: bool,
    pub pem: bool,
    pub at: bool,
    pub plus_digit: bool,
    pub scheme: bool,
    /// A word starting `[A-Z]{2}[0-9]{2}` (IBAN).
    pub iban: bool,
    pub aws: bool,
    pub google: bool,
    pub jwt: bool,
    pub github: bool,
    pub slack: bool,
    pub stripe: bool,
    pub hex0x: bool,
    pub base58: bool,
    pub bech32: bool,
    /// The word `sort` or `sortcode` (the sort code's keyword).
    pub sort_code: bool,
    /// The word `passport`.
    pub passport: bool,
    /// A birth keyword: `born`, `dob`, `birth`, `birthdate`, or `d` followed by `.o.b`.
    pub birth: bool,
}

/// Whether detector `d` matches somewhere in the (folded) text.
pub fn matches(d: Detector, t: &[u8]) -> bool {
    match d {
        Detector::CardNumber => card_number(t),
        Detector::Ssn => ssn(t),
        Detector::Iban => iban(t),
        Detector::AbaRouting => aba_routing(t),
        Detector::Email => email(t),
        Detector::Phone => phone(t),
        Detector::BitcoinAddress => bitcoin(t),
        Detector::EthereumAddress => ethereum(t),
        Detector::SortCodeAccount => identity::sort_code_account(t),
        Detector::PassportNumber => identity::passport_number(t),
        Detector::NameDobAddress => identity::name_dob_address(t),
        Detector::PemPrivateKey => PEM.is_match(t),
        Detector::AwsAccessKey => aws(t),
        Detector::Jwt => jwt(t),
        Detector::GithubToken => github(t),
        Detector::SlackToken => slack(t),
        Detector::StripeKey => stripe(t),
        Detector::GoogleApiKey => google(t),
        Detector::UrlCredentials => url_credentials(t),
    }
}

impl Gates {
    /// The detectors the gates admit, as a set (one pass over the flags; the common case, plain
    /// text, admits none and costs no more).
    pub fn admitted(&self) -> Set {
        let mut bits = 0u32;
        let mut on = |c: bool, d: Detector| bits |= (c as u32) << (d as u32);
        on(self.digit_chain >= 13, Detector::CardNumber);
        on(self.dashed_nine, Detector::Ssn);
        on(self.iban, Detector::Iban);
        on(self.nine_digits, Detector::AbaRouting);
        on(self.at, Detector::Email);
        on(self.plus_digit || self.phone_chain >= 7, Detector::Phone);
        on(self.base58 || self.bech32, Detector::BitcoinAddress);
        on(self.hex0x, Detector::EthereumAddress);
        on(self.sort_code, Detector::SortCodeAccount);
        on(self.passport, Detector::PassportNumber);
        on(self.birth, Detector::NameDobAddress);
        on(self.pem, Detector::PemPrivateKey);
        on(self.aws, Detector::AwsAccessKey);
        on(self.jwt, Detector::Jwt);
        on(self.github, Detector::GithubToken);
        on(self.slack, Detector::SlackToken);
        on(self.stripe, Detector::StripeKey);
        on(self.google, Detector::GoogleApiKey);
        on(self.scheme && self.at, Detector::UrlCredentials);
        Set(bits)
    }
}

impl Set {
    /// Members also in `other`.
    pub fn and(self, other: Set) -> Set {
        Set(self.0 & other.0)
    }

    /// Members of either.
    pub fn or(self, other: Set) -> Set {
        Set(self.0 | other.0)
    }

    /// The members of one tier.
    pub fn of_tier(self, tier: Tier) -> Set {
        let restricted = Set::of(&[
            Detector::CardNumber,
            Detector::Ssn,
            Detector::Iban,
            Detector::AbaRouting,
            Detector::Email,
            Detector::Phone,
            Detector::BitcoinAddress,
            Detector::EthereumAddress,
            Detector::SortCodeAccount,
            Detector::PassportNumber,
            Detector::NameDobAddress,
        ]);
        match tier {
            Tier::Restricted => self.and(restricted),
            Tier::Confidential => Set(self.0 & !restricted.0),
            _ => Set::NONE,
        }
    }
}

/// The first detector of `candidates` (already filtered by the gates), in order, whose tier is
/// `tier` and that matches.
pub fn first_match(t: &[u8], candidates: Set, tier: Tier) -> Option<Detector> {
    let c = candidates.of_tier(tier);
    if c.is_empty() {
        return None;
    }
    c.iter().find(|&d| matches(d, t))
}

/// Every detector of `set` that matches `text` (folded first). For rules outside classification
/// that call detectors by name.
pub fn find(text: &str, set: Set) -> Set {
    let folded = crate::fold::fold(text);
    find_folded(folded.text.as_bytes(), set)
}

/// `find` on text that is already folded (or is not UTF-8 and cannot be).
pub fn find_folded(t: &[u8], set: Set) -> Set {
    let mut out = Set::NONE;
    for d in set.iter() {
        if matches(d, t) {
            out.insert(d);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// A word boundary before `i`.
fn starts_word(t: &[u8], i: usize) -> bool {
    i == 0 || !is_word(t[i - 1])
}

/// A word boundary at `i` (the end of a match).
fn ends_word(t: &[u8], i: usize) -> bool {
    i >= t.len() || !is_word(t[i])
}

/// Positions where `needle` starts.
fn occurrences<'t>(t: &'t [u8], needle: &'t [u8]) -> impl Iterator<Item = usize> + 't {
    memchr::memmem::find_iter(t, needle)
}

fn run_len(t: &[u8], from: usize, ok: impl Fn(u8) -> bool) -> usize {
    t[from.min(t.len())..].iter().take_while(|&&b| ok(b)).count()
}

/// Whether one of `words` (ASCII, lower case) is a whole word (a maximal run of `[A-Za-z0-9_]`,
/// compared case-insensitively) starting within `CONTEXT_WINDOW` bytes of `start..end`.
pub fn context_near(t: &[u8], start: usize, end: usize, words: &[&str]) -> bool {
    let lo = start.saturating_sub(CONTEXT_WINDOW);
    let hi = (end + CONTEXT_WINDOW).min(t.len());
    let mut j = lo;
    while j < hi {
        if is_word(t[j]) && starts_word(t, j) {
            let n = run_len(t, j, is_word);
            let word = &t[j..j + n];
            if words.iter().any(|k| word.eq_ignore_ascii_case(k.as_bytes())) {
                return true;
            }
            j += n;
        } else {
            j += 1;
        }
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Restricted.

/// The card candidates `card_spans` finds, as a pattern (kept to test the scanner against).
#[cfg(test)]
static CARD: LazyLock<Regex> = LazyLock::new(|| build(r"\b\d(?:[ -]?\d){12,18}\b"));
static SSN: LazyLock<Regex> = LazyLock::new(|| build(r"\b\d{3}-\d{2}-\d{4}\b"));
static PEM: LazyLock<Regex> = LazyLock::new(|| build(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"));
static JWT: LazyLock<Regex> =
    LazyLock::new(|| build(r"\beyJ[A-Za-z0-9_-]{2,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"));

fn build(p: &str) -> Regex {
    regex::bytes::RegexBuilder::new(p).unicode(false).build().expect("built-in detector patterns are valid")
}

/// Luhn checksum over the digits of `candidate` (separators ignored), 13 to 19 digits.
pub fn luhn_valid(candidate: &[u8]) -> bool {
    let digits = digits_of(candidate);
    (13..=19).contains(&digits.len()) && luhn(&digits)
}

/// The digits of a candidate, separators dropped.
fn digits_of(candidate: &[u8]) -> Vec<u32> {
    candidate.iter().filter(|b| b.is_ascii_digit()).map(|b| u32::from(b - b'0')).collect()
}

fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| if i % 2 == 1 { if d * 2 > 9 { d * 2 - 9 } else { d * 2 } } else { d })
        .sum();
    sum % 10 == 0
}

/// Whether a card number of `digits` falls in an issuer's range with a length that issuer uses.
pub fn card_issuer_valid(digits: &[u32]) -> bool {
    let n = digits.len();
    let prefix = |k: usize| digits.iter().take(k).fold(0u32, |a, d| a * 10 + d);
    let (p1, p2, p3, p4) = (prefix(1), prefix(2), prefix(3), prefix(4));
    match p1 {
        4 => matches!(n, 13 | 16 | 19),                                              // Visa
        5 => match p2 {
            51..=55 => n == 16,                                                      // Mastercard
            50 | 56..=59 => (13..=19).contains(&n),                                  // Maestro
            _ => false,
        },
        2 => ((2221..=2720).contains(&p4) && n == 16) || ((2200..=2204).contains(&p4) && (16..=19).contains(&n)), // Mastercard 2-series, Mir
        3 => match p2 {
            34 | 37 => n == 15,                                                      // Amex
            36 | 38 | 39 => (14..=19).contains(&n),                                  // Diners
            30 => (300..=305).contains(&p3) && (14..=19).contains(&n),              // Diners
            35 => (3528..=3589).contains(&p4) && (16..=19).contains(&n),            // JCB
            _ => false,
        },
        6 => (13..=19).contains(&n), // Discover, UnionPay, Maestro, RuPay: the 6 range is issued
        _ => false,
    }
}

fn card_number(t: &[u8]) -> bool {
    let mut digits = [0u32; 19];
    card_spans(t, |m| {
        let mut n = 0;
        for &b in m.iter().filter(|b| b.is_ascii_digit()) {
            digits[n] = u32::from(b - b'0');
            n += 1;
        }
        luhn(&digits[..n]) && card_issuer_valid(&digits[..n])
    })
}

/// Calls `f` on each match of `\b\d(?:[ -]?\d){12,18}\b` in `t` (ASCII classes, leftmost
/// first, each search going on after the previous match, as `Regex::find_iter` gives them) until
/// it returns true; whether it did. Written out, since a text with long digit runs (a timestamp,
/// a random number) reaches this on every write: each repetition takes a separator only when a
/// digit follows it and a digit otherwise, so the repetitions are fixed by the text, and the
/// regex's backtracking is only the choice of how many of them (18 down to 12) end at a word
/// boundary.
fn card_spans(t: &[u8], mut f: impl FnMut(&[u8]) -> bool) -> bool {
    let n = t.len();
    let mut i = 0;
    while i < n {
        if !(t[i].is_ascii_digit() && starts_word(t, i)) {
            i += 1;
            continue;
        }
        // ends[k]: where the match would end after k repetitions.
        let mut ends = [0usize; 19];
        let (mut p, mut k) = (i + 1, 0);
        while k < 18 {
            if p + 1 < n && matches!(t[p], b' ' | b'-') && t[p + 1].is_ascii_digit() {
                p += 2;
            } else if p < n && t[p].is_ascii_digit() {
                p += 1;
            } else {
                break;
            }
            k += 1;
            ends[k] = p;
        }
        match (12..=k).rev().find(|&r| ends_word(t, ends[r])) {
            Some(r) => {
                if f(&t[i..ends[r]]) {
                    return true;
                }
                i = ends[r];
            }
            None => i += 1,
        }
    }
    false
}

/// SSA rules: area 001–665, 667–899; group 01–99; serial 0001–9999.
pub fn ssn_valid(d: &[u8]) -> bool {
    let num = |s: &[u8]| s.iter().fold(0u32, |a, b| a * 10 + u32::from(b - b'0'));
    let (area, group, serial) = (num(&d[0..3]), num(&d[4..6]), num(&d[7..11]));
    area != 0 && area != 666 && area < 900 && group != 0 && serial != 0
}

fn ssn(t: &[u8]) -> bool {
    SSN.find_iter(t).any(|m| ssn_valid(m.as_bytes()))
}

/// ISO 13616 IBAN lengths by country (SWIFT IBAN registry).
const IBAN_LENGTHS: &[(&[u8; 2], usize)] = &[
    (b"AD", 24), (b"AE", 23), (b"AL", 28), (b"AT", 20), (b"AZ", 28), (b"BA", 20), (b"BE", 16),
    (b"BG", 22), (b"BH", 22), (b"BI", 27), (b"BR", 29), (b"BY", 28), (b"CH", 21), (b"CR", 22),
    (b"CY", 28), (b"CZ", 24), (b"DE", 22), (b"DJ", 27), (b"DK", 18), (b"DO", 28), (b"EE", 20),
    (b"EG", 29), (b"ES", 24), (b"FI", 18), (b"FK", 18), (b"FO", 18), (b"FR", 27), (b"GB", 22),
    (b"GE", 22), (b"GI", 23), (b"GL", 18), (b"GR", 27), (b"GT", 28), (b"HN", 28), (b"HR", 21),
    (b"HU", 28), (b"IE", 22), (b"IL", 23), (b"IQ", 23), (b"IS", 26), (b"IT", 27), (b"JO", 30),
    (b"KW", 30), (b"KZ", 20), (b"LB", 28), (b"LC", 32), (b"LI", 21), (b"LT", 20), (b"LU", 20),
    (b"LV", 21), (b"LY", 25), (b"MC", 27), (b"MD", 24), (b"ME", 22), (b"MK", 19), (b"MN", 20),
    (b"MR", 27), (b"MT", 31), (b"MU", 30), (b"NI", 28), (b"NL", 18), (b"NO", 15), (b"OM", 23),
    (b"PK", 24), (b"PL", 28), (b"PS", 29), (b"PT", 25), (b"QA", 29), (b"RO", 24), (b"RS", 22),
    (b"RU", 33), (b"SA", 24), (b"SC", 31), (b"SD", 18), (b"SE", 24), (b"SI", 19), (b"SK", 24),
    (b"SM", 27), (b"SO", 23), (b"ST", 25), (b"SV", 28), (b"TL", 23), (b"TN", 24), (b"TR", 26),
    (b"UA", 29), (b"VA", 22), (b"VG", 24), (b"XK", 20), (b"YE", 30),
];

pub fn iban_length(country: &[u8]) -> Option<usize> {
    IBAN_LENGTHS.iter().find(|(c, _)| &c[..] == country).map(|&(_, n)| n)
}

/// Mod-97 check of an IBAN in compact form (upper-case letters and digits).
pub fn iban_valid(iban: &[u8]) -> bool {
    if iban.len() < 5 || iban_length(&iban[..2]) != Some(iban.len()) || !iban[2..4].iter().all(u8::is_ascii_digit) {
        return false;
    }
    let mut rem: u32 = 0;
    for &b in iban[4..].iter().chain(&iban[..4]) {
        rem = match b {
            b'0'..=b'9' => (rem * 10 + u32::from(b - b'0')) % 97,
            b'A'..=b'Z' => (rem * 100 + u32::from(b - b'A') + 10) % 97,
            _ => return false,
        };
    }
    rem == 1
}

fn iban_char(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

fn iban(t: &[u8]) -> bool {
    let n = t.len();
    (0..n.saturating_sub(3)).any(|i| {
        if !(t[i].is_ascii_uppercase()
            && t[i + 1].is_ascii_uppercase()
            && t[i + 2].is_ascii_digit()
            && t[i + 3].is_ascii_digit()
            && starts_word(t, i))
        {
            return false;
        }
        let Some(len) = iban_length(&t[i..i + 2]) else { return false };
        // Compact form.
        let run = run_len(t, i, iban_char);
        if run == len && ends_word(t, i + run) {
            return iban_valid(&t[i..i + len]);
        }
        // Groups of four separated by single spaces; the last may be shorter.
        let mut compact = Vec::with_capacity(len);
        let mut j = i;
        loop {
            let g = run_len(t, j, iban_char);
            if g == 0 || g > 4 || (g < 4 && compact.len() + g != len) {
                return false;
            }
            compact.extend_from_slice(&t[j..j + g]);
            j += g;
            if compact.len() == len {
                return ends_word(t, j) && iban_valid(&compact);
            }
            if compact.len() > len || j >= n || t[j] != b' ' {
                return false;
            }
            j += 1;
        }
    })
}

/// ABA checksum and Federal Reserve routing symbol prefix.
pub fn aba_valid(d: &[u8]) -> bool {
    if d.len() != 9 || !d.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let v: Vec<u32> = d.iter().map(|b| u32::from(b - b'0')).collect();
    let prefix = v[0] * 10 + v[1];
    let sum = 3 * (v[0] + v[3] + v[6]) + 7 * (v[1] + v[4] + v[7]) + (v[2] + v[5] + v[8]);
    sum % 10 == 0 && matches!(prefix, 0..=12 | 21..=32 | 61..=72 | 80)
}

fn aba_routing(t: &[u8]) -> bool {
    let n = t.len();
    let mut i = 0;
    while i < n {
        if t[i].is_ascii_digit() && starts_word(t, i) {
            let run = run_len(t, i, |b| b.is_ascii_digit());
            let joined_before = i >= 2 && matches!(t[i - 1], b'-' | b'.') && t[i - 2].is_ascii_digit();
            let joined_after = i + run + 1 < n && matches!(t[i + run], b'-' | b'.') && t[i + run + 1].is_ascii_digit();
            if run == 9
                && ends_word(t, i + run)
                && !joined_before
                && !joined_after
                && aba_valid(&t[i..i + 9])
                && context_near(t, i, i + 9, ROUTING_WORDS)
            {
                return true;
            }
            i += run.max(1);
        } else {
            i += 1;
        }
    }
    false
}

fn email_local(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'%' | b'+' | b'-')
}

/// The end of a domain of at least two labels with an alphabetic TLD starting at `from`, or None.
fn domain_end(t: &[u8], from: usize) -> Option<usize> {
    let mut j = from;
    let mut labels = 0;
    let mut last: &[u8] = &[];
    loop {
        let l = run_len(t, j, |b| b.is_ascii_alphanumeric() || b == b'-');
        if l == 0 || l > 63 || t[j] == b'-' || t[j + l - 1] == b'-' {
            break;
        }
        last = &t[j..j + l];
        labels += 1;
        j += l;
        if j + 1 < t.len() && t[j] == b'.' && t[j + 1].is_ascii_alphanumeric() {
            j += 1;
        } else {
            break;
        }
    }
    (labels >= 2 && (2..=63).contains(&last.len()) && last.iter().all(u8::is_ascii_alphabetic)).then_some(j)
}

fn email(t: &[u8]) -> bool {
    memchr::memchr_iter(b'@', t).any(|a| {
        let ls = a - t[..a].iter().rev().take_while(|&&b| email_local(b)).count();
        let local = &t[ls..a];
        if local.is_empty() || local.len() > 64 || local[0] == b'.' || local[local.len() - 1] == b'.' {
            return false;
        }
        if local.windows(2).any(|w| w == b"..") || (ls > 0 && matches!(t[ls - 1], b':' | b'/' | b'@')) {
            return false;
        }
        let Some(end) = domain_end(t, a + 1) else { return false };
        if end < t.len() && (t[end] == b'@' || is_word(t[end])) {
            return false;
        }
        // `git@github.com:org/repo.git`: an SSH remote, not a mailbox.
        !(end + 1 < t.len() && t[end] == b':' && (is_word(t[end + 1]) || t[end + 1] == b'/'))
    })
}

/// Assigned ITU-T E.164 country calling codes (1–3 digits).
fn country_code_assigned(code: u32) -> bool {
    matches!(
        code,
        1 | 7 | 20 | 27 | 30..=34 | 36 | 39 | 40 | 41 | 43..=49 | 51..=58 | 60..=66 | 81 | 82 | 84 | 86
            | 90..=95 | 98 | 211..=218 | 220..=258 | 260..=269 | 290 | 291 | 297..=299 | 350..=359
            | 370..=378 | 380..=383 | 385..=387 | 389 | 420 | 421 | 423 | 500..=509 | 590..=599
            | 670 | 672..=692 | 800 | 808 | 850 | 852 | 853 | 855 | 856 | 870 | 878 | 880..=883
            | 886 | 888 | 960..=968 | 970..=977 | 979 | 992..=996 | 998
    ) && !matches!(code, 214 | 215 | 217)
}

/// A group of a phone-shaped run at `j`: a run of digits, or (while `paren_free`) a parenthesised
/// run of digits. `(where its digits start, how many, whether parenthesised)`, or None when no
/// whole group starts at `j`.
fn phone_group(t: &[u8], j: usize, paren_free: bool) -> Option<(usize, usize, bool)> {
    match *t.get(j)? {
        b'(' if paren_free => {
            let g = run_len(t, j + 1, |b| b.is_ascii_digit());
            (g > 0 && t.get(j + 1 + g) == Some(&b')')).then_some((j + 1, g, true))
        }
        b if b.is_ascii_digit() => Some((j, run_len(t, j, |b| b.is_ascii_digit()), false)),
        _ => None,
    }
}

/// Digits of a phone-shaped run from `from`: groups of digits, at most one of them parenthesised,
/// joined by one separator (space, dash, dot) or, next to the parenthesis, by nothing.
/// `Ok((digits, end, group sizes))`, or `Err(end)` where the shape ends when it is not a phone
/// number (callers resume there: every run is read once).
///
/// A group is taken only whole: what follows the last group (a separator and then `(mobile)`, a
/// lone `(`, a trailing dash) is not part of the run, which ends after that group.
fn phone_run(t: &[u8], from: usize) -> Result<(Vec<u8>, usize, Vec<usize>), usize> {
    let Some(mut group) = phone_group(t, from, true) else {
        // Nothing to read here: resume after the `(` and the digits after it, if any.
        let g = if t.get(from) == Some(&b'(') { run_len(t, from + 1, |b| b.is_ascii_digit()) } else { 0 };
        return Err(from + 1 + g);
    };
    let mut digits = Vec::new();
    let mut groups = Vec::new();
    let mut paren = false;
    let mut j;
    loop {
        let (start, g, parenthesised) = group;
        digits.extend_from_slice(&t[start..start + g]);
        groups.push(g);
        paren |= parenthesised;
        j = start + g + usize::from(parenthesised);
        // The next group: right next to a parenthesis (`(415)555`, `415(555)`), or after one
        // separator.
        let next = phone_group(t, j, !paren).or_else(|| {
            let sep = j < t.len() && matches!(t[j], b' ' | b'-' | b'.');
            sep.then(|| phone_group(t, j + 1, !paren)).flatten()
        });
        match next {
            Some(n) => group = n,
            None => break,
        }
    }
    if j < t.len() && (is_word(t[j]) || (t[j] == b':' && j + 1 < t.len() && t[j + 1].is_ascii_digit())) {
        return Err(j);
    }
    Ok((digits, j, groups))
}

fn phone(t: &[u8]) -> bool {
    let n = t.len();
    // E.164: `+`, an assigned country code, 8-15 digits.
    for p in memchr::memchr_iter(b'+', t) {
        if p + 1 >= n || !matches!(t[p + 1], b'1'..=b'9' | b'(') || (p > 0 && is_word(t[p - 1])) {
            continue;
        }
        if let Ok((d, _, _)) = phone_run(t, p + 1) {
            let code = |k: usize| d.iter().take(k).fold(0u32, |a, b| a * 10 + u32::from(b - b'0'));
            let assigned = (1..=3).any(|k| d.len() > k && country_code_assigned(code(k)));
            if (8..=15).contains(&d.len()) && assigned {
                return true;
            }
        }
    }
    // National forms, only with a phone word nearby.
    let mut i = 0;
    while i < n {
        let start_ok = (t[i].is_ascii_digit() || t[i] == b'(') && (i == 0 || !(is_word(t[i - 1]) || t[i - 1] == b'+'));
        if !start_ok {
            i += 1;
            continue;
        }
        match phone_run(t, i) {
            Ok((d, end, groups)) => {
                let dashed_date = groups.len() == 3 && groups[0] == 4 && groups[1] <= 2 && groups[2] <= 2;
                // North American numbers: area code and exchange start with 2-9.
                let nanp_ok = match d.len() {
                    10 => d[0] >= b'2' && d[3] >= b'2',
                    11 if d[0] == b'1' => d[1] >= b'2' && d[4] >= b'2',
                    _ => true,
                };
                if (7..=15).contains(&d.len()) && !dashed_date && nanp_ok && context_near(t, i, end, PHONE_WORDS) {
                    return true;
                }
                i = end.max(i + 1);
            }
            Err(end) => i = end.max(i + 1),
        }
    }
    false
}

fn base58_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() && !matches!(b, b'0' | b'O' | b'I' | b'l')
}

pub fn base58check_address_valid(s: &[u8]) -> bool {
    if !(26..=35).contains(&s.len()) || !matches!(s[0], b'1' | b'3') || !s.iter().all(|&b| base58_char(b)) {
        return false;
    }
    match bs58::decode(s).with_check(None).into_vec() {
        Ok(v) => v.len() == 21 && matches!(v[0], 0x00 | 0x05),
        Err(_) => false,
    }
}

pub fn bech32_address_valid(s: &[u8]) -> bool {
    if !(14..=90).contains(&s.len()) || !s[..3].eq_ignore_ascii_case(b"bc1") {
        return false;
    }
    let Ok(s) = std::str::from_utf8(s) else { return false };
    match bech32::segwit::decode(s) {
        Ok((hrp, _, _)) => hrp.as_str().eq_ignore_ascii_case("bc"),
        Err(_) => false,
    }
}

fn bitcoin(t: &[u8]) -> bool {
    let n = t.len();
    let mut i = 0;
    while i < n {
        if t[i].is_ascii_alphanumeric() && starts_word(t, i) {
            let run = run_len(t, i, |b| b.is_ascii_alphanumeric());
            let tok = &t[i..i + run];
            if ends_word(t, i + run) && (base58check_address_valid(tok) || bech32_address_valid(tok)) {
                return true;
            }
            i += run;
        } else {
            i += 1;
        }
    }
    false
}

/// EIP-55: the letters of a mixed-case address are upper case exactly where the Keccak-256 of
/// the lower-case hex has a nibble >= 8.
pub fn eip55_valid(hex40: &[u8]) -> bool {
    let lower: Vec<u8> = hex40.iter().map(u8::to_ascii_lowercase).collect();
    let hash = Keccak256::digest(&lower);
    hex40.iter().enumerate().all(|(i, &c)| {
        let nibble = (hash[i / 2] >> if i % 2 == 0 { 4 } else { 0 }) & 0xf;
        match c {
            b'a'..=b'f' => nibble < 8,
            b'A'..=b'F' => nibble >= 8,
            _ => true,
        }
    })
}

fn ethereum(t: &[u8]) -> bool {
    occurrences(t, b"0x").any(|i| {
        if !starts_word(t, i) {
            return false;
        }
        let h = &t[i + 2..];
        let run = run_len(h, 0, |b| b.is_ascii_hexdigit());
        if run != 40 || !ends_word(h, 40) {
            return false;
        }
        let addr = &h[..40];
        let upper = addr.iter().any(u8::is_ascii_uppercase);
        let lower = addr.iter().any(u8::is_ascii_lowercase);
        if upper && lower {
            eip55_valid(addr)
        } else {
            context_near(t, i, i + 42, WALLET_WORDS)
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Confidential.

fn aws(t: &[u8]) -> bool {
    let base32 = |b: u8| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b);
    occurrences(t, b"AKIA").chain(occurrences(t, b"ASIA")).any(|i| {
        starts_word(t, i)
            && run_len(t, i + 4, base32) >= 16
            && ends_word(t, i + 20)
    })
}

/// A JWT's header must decode to a JSON object with `alg`, its payload to a JSON object.
pub fn jwt_valid(token: &[u8]) -> bool {
    let mut parts = token.split(|&b| b == b'.');
    let (Some(h), Some(p)) = (parts.next(), parts.next()) else { return false };
    let decode = |s: &[u8]| -> Option<serde_json::Map<String, serde_json::Value>> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).ok()?;
        match serde_json::from_slice(&bytes).ok()? {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        }
    };
    matches!(decode(h), Some(m) if m.get("alg").is_some_and(serde_json::Value::is_string)) && decode(p).is_some()
}

fn jwt(t: &[u8]) -> bool {
    JWT.find_iter(t).any(|m| jwt_valid(m.as_bytes()))
}

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The CRC32 of a GitHub token's 30 random characters, in base62, six characters.
pub fn github_checksum(random: &[u8]) -> [u8; 6] {
    let mut v = crc32fast::hash(random);
    let mut out = [b'0'; 6];
    for slot in out.iter_mut().rev() {
        *slot = BASE62[(v % 62) as usize];
        v /= 62;
    }
    out
}

fn github(t: &[u8]) -> bool {
    occurrences(t, b"gh").chain(occurrences(t, b"github_pat_")).any(|i| {
        if !starts_word(t, i) {
            return false;
        }
        let rest = &t[i..];
        if rest.len() >= 4 && matches!(rest[2], b'p' | b'o' | b'u' | b's' | b'r') && rest[3] == b'_' {
            let body = &rest[4..];
            return run_len(body, 0, |b| b.is_ascii_alphanumeric()) == 36
                && ends_word(body, 36)
                && github_checksum(&body[..30]) == body[30..36];
        }
        if let Some(body) = rest.strip_prefix(b"github_pat_") {
            return run_len(body, 0, |b| b.is_ascii_alphanumeric()) == 22
                && body.get(22) == Some(&b'_')
                && run_len(body, 23, |b| b.is_ascii_alphanumeric()) == 59
                && ends_word(body, 82);
        }
        false
    })
}

fn slack(t: &[u8]) -> bool {
    // A token's run is read once: occurrences inside a run already read are skipped.
    let mut read_to = 0;
    occurrences(t, b"xox").any(|i| {
        if i < read_to || !starts_word(t, i) || i + 4 >= t.len() || !matches!(t[i + 3], b'a' | b'b' | b'p' | b'o' | b's' | b'r') || t[i + 4] != b'-' {
            return false;
        }
        let body = &t[i + 5..];
        let run = run_len(body, 0, |b| b.is_ascii_alphanumeric() || b == b'-');
        read_to = i + 5 + run;
        let tok = &body[..run];
        let segments = tok.split(|&b| b == b'-').filter(|s| !s.is_empty()).count();
        run >= 15 && segments >= 2 && tok.iter().any(u8::is_ascii_digit) && ends_word(body, run)
    })
}

fn stripe(t: &[u8]) -> bool {
    occurrences(t, b"k_live_").any(|i| {
        if i == 0 || !matches!(t[i - 1], b's' | b'r') || !starts_word(t, i - 1) {
            return false;
        }
        let run = run_len(t, i + 7, |b| b.is_ascii_alphanumeric());
        (24..=99).contains(&run) && ends_word(t, i + 7 + run)
    })
}

fn google(t: &[u8]) -> bool {
    let key = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    occurrences(t, b"AIza").any(|i| {
        (i == 0 || !key(t[i - 1])) && run_len(t, i + 4, key) == 35
    })
}

fn url_credentials(t: &[u8]) -> bool {
    occurrences(t, b"://").any(|c| {
        let scheme = t[..c].iter().rev().take_while(|&&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-')).count();
        if scheme == 0 || !t[c - scheme].is_ascii_alphabetic() {
            return false;
        }
        let auth_start = c + 3;
        let auth_len = run_len(t, auth_start, |b| {
            !(b.is_ascii_whitespace() || matches!(b, b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>' | b'`'))
        });
        let auth = &t[auth_start..auth_start + auth_len];
        let Some(at) = auth.iter().rposition(|&b| b == b'@') else { return false };
        let (userinfo, host) = (&auth[..at], &auth[at + 1..]);
        let host_ok = host.first().is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'[');
        match userinfo.iter().position(|&b| b == b':') {
            Some(k) => k + 1 < userinfo.len() && host_ok,
            None => false,
        }
    })
}

mod identity;

pub use identity::{birth_date_valid, passport_shape};

#[cfg(test)]
mod tests;
