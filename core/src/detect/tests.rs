//! Tests of the validated detectors: valid and invalid samples per detector, look-alikes, folding
//! and evasion, and the property tests of the gated path against the reference. This file is long
//! because every detector's samples sit in the same few tables, beside the tests that read them.

use super::*;
use crate::classify::{classify, classify_reference, explain, Rule};
use proptest::prelude::*;

fn fires(d: Detector, text: &str) -> bool {
    find(text, Set::of(&[d])).contains(d)
}

/// Valid samples, from the formats' own published examples where they exist (named), or built
/// by an independent implementation (Python's zlib for the GitHub CRC32).
const VALID: &[(Detector, &str)] = &[
    // Test numbers published by the card networks / payment processors.
    (Detector::CardNumber, "card 4111 1111 1111 1111 on file"),
    (Detector::CardNumber, "5555555555554444"),
    (Detector::CardNumber, "Amex 378282246310005"),
    (Detector::CardNumber, "6011-1111-1111-1117"),
    (Detector::CardNumber, "JCB 3530111333300000"),
    (Detector::CardNumber, "diners 30569309025904"),
    (Detector::CardNumber, "mc2 2223003122003222"),
    (Detector::Ssn, "his number is 123-45-6789."),
    (Detector::Ssn, "078-05-1120"),
    // SWIFT IBAN registry examples.
    (Detector::Iban, "pay to GB82 WEST 1234 5698 7654 32 today"),
    (Detector::Iban, "GB82WEST12345698765432"),
    (Detector::Iban, "DE89 3704 0044 0532 0130 00"),
    (Detector::Iban, "FR14 2004 1010 0505 0001 3M02 606"),
    (Detector::Iban, "NO93 8601 1117 947"),
    (Detector::Iban, "MT84 MALT 0110 0001 2345 MTLC AST0 01S"),
    (Detector::Iban, "LC55HEMM000100010012001200023015"),
    // Federal Reserve routing numbers of large banks.
    (Detector::AbaRouting, "routing number 021000021"),
    (Detector::AbaRouting, "ABA: 011000015, account 12345"),
    (Detector::AbaRouting, "026009593 is the RTN"),
    (Detector::Email, "write to jane.doe+memo@example.co.uk please"),
    (Detector::Email, "<ops@bank.example>"),
    (Detector::Phone, "call +1 415 555 2671"),
    (Detector::Phone, "+14155552671"),
    (Detector::Phone, "UK office +44 20 7946 0958."),
    (Detector::Phone, "mobile: (415) 555-2671"),
    (Detector::Phone, "tel 07911 123456"),
    (Detector::Phone, "phone 415.555.2671"),
    // The genesis block address, BIP-13's P2SH example, BIP-173 and BIP-350 examples.
    (Detector::BitcoinAddress, "send to 1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa"),
    (Detector::BitcoinAddress, "3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy"),
    (Detector::BitcoinAddress, "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"),
    (Detector::BitcoinAddress, "BC1QW508D6QEJXTDG4Y5R3ZARVARY0C5XW7KV8F3T4"),
    (Detector::BitcoinAddress, "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0"),
    // EIP-55's examples.
    (Detector::EthereumAddress, "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"),
    (Detector::EthereumAddress, "to 0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359."),
    (Detector::EthereumAddress, "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB"),
    (Detector::EthereumAddress, "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb"),
    (Detector::EthereumAddress, "my wallet 0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"),
    // Issue 46: what a bank's reviewer calls personal data.
    (Detector::SortCodeAccount, "sort code 20-00-00, account 12345678"),
    (Detector::SortCodeAccount, "Sort-code: 04 00 04 / 87654321"),
    (Detector::SortCodeAccount, "pay 12345678 (acct), sortcode 40-47-84"),
    (Detector::SortCodeAccount, "Sort Code 30-94-57 Account No. 01234567"),
    (Detector::PassportNumber, "passport no. 123456789"),
    (Detector::PassportNumber, "Passport number: C01X00T47"),
    (Detector::PassportNumber, "PASSPORT # A12345678 issued 2019"),
    (Detector::PassportNumber, "her passport is 12AB34567 (France)"),
    (Detector::PassportNumber, "passport: YA1234567"),
    (Detector::PassportNumber, "Canadian passport GA302922"),
    (Detector::NameDobAddress, "Mr John Smith, DOB 14/03/1982, lives at 12 Acacia Avenue, Leeds"),
    (Detector::NameDobAddress, "Customer Jane Smith, born 1975-07-04, address 221B Baker Street, London NW1 6XE"),
    (Detector::NameDobAddress, "name: Ana María Lopez; date of birth: 3 March 1990; LS1 4AB"),
    (Detector::NameDobAddress, "Dr. J. Okafor (D.O.B. March 5th, 1968) moved to 1600 Pennsylvania Avenue"),
    (Detector::PemPrivateKey, "-----BEGIN RSA PRIVATE KEY-----\nMIIE..."),
    (Detector::PemPrivateKey, "-----BEGIN PRIVATE KEY-----"),
    // AWS documentation's example key ids.
    (Detector::AwsAccessKey, "AKIAIOSFODNN7EXAMPLE"),
    (Detector::AwsAccessKey, "session ASIAY34FZKBOKMUTVV7A"),
    // jwt.io's example token.
    (Detector::Jwt, "Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"),
    (Detector::GithubToken, "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"),
    (Detector::GithubToken, "token=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"),
    (Detector::GithubToken, "ghs_mxgJTeKdNnFRIBXuDL7DxtpYlSXpfK0IYYek"),
    (Detector::GithubToken, "github_pat_11ABCDEFG0123456789abc_0123456789abcdefghijABCDEFGHIJ0123456789abcdefghijABCDEFGHI"),
    (Detector::SlackToken, "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    (Detector::SlackToken, "xoxp-1234-5678-91011-abcdef0123456789"),
    (Detector::StripeKey, "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (Detector::StripeKey, "rk_live_51H8abcdefghijklmnopqrstuvwxyz"),
    (Detector::GoogleApiKey, "key=AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"),
    (Detector::UrlCredentials, "postgres://app:s3cret@db.internal:5432/prod"),
    (Detector::UrlCredentials, "redis://:hunter2@cache:6379"),
    (Detector::UrlCredentials, "see https://user:pa%40ss@example.com/x"),
];

/// Wrong checksums, truncated and over-long forms, and missing context: none may fire.
const INVALID: &[(Detector, &str)] = &[
    (Detector::CardNumber, "4111 1111 1111 1112"),          // Luhn
    (Detector::CardNumber, "4111 1111 1111"),               // truncated
    (Detector::CardNumber, "41111111111111111111"),         // over-long
    (Detector::CardNumber, "1234567812345670"),             // Luhn-valid, no issuer starts with 1
    (Detector::CardNumber, "9111111111111115"),             // Luhn-valid, 9 is not a card range
    (Detector::CardNumber, "37828224631000"),               // Amex length 14
    (Detector::Ssn, "000-12-3456"),
    (Detector::Ssn, "666-12-3456"),
    (Detector::Ssn, "923-45-6789"),
    (Detector::Ssn, "123-00-6789"),
    (Detector::Ssn, "123-45-0000"),
    (Detector::Ssn, "123-45-67890"),
    (Detector::Ssn, "1123-45-6789"),
    (Detector::Iban, "GB82 WEST 1234 5698 7654 33"),        // mod-97
    (Detector::Iban, "GB82 WEST 1234 5698 7654"),           // truncated
    (Detector::Iban, "GB82 WEST 1234 5698 7654 321"),       // over-long
    (Detector::Iban, "GB82WEST123456987654321"),
    (Detector::Iban, "ZZ82 WEST 1234 5698 7654 32"),        // no such country
    (Detector::Iban, "gb82 west 1234 5698 7654 32"),        // lower case
    (Detector::Iban, "GB82  WEST 1234 5698 7654 32"),       // double space
    (Detector::AbaRouting, "021000021"),                     // no context word
    (Detector::AbaRouting, "routing 021000022"),             // checksum
    (Detector::AbaRouting, "routing 991000021"),             // checksum ok? prefix 99 is not a Fed district
    (Detector::AbaRouting, "routing 0210000210"),            // over-long
    (Detector::AbaRouting, "routing 02100002"),              // truncated
    (Detector::AbaRouting, "routing 555-021000021"),         // part of a longer number
    (Detector::Email, "user@localhost"),
    (Detector::Email, "@alice mentioned it"),
    (Detector::Email, "lodash@4.17.21"),
    (Detector::Email, "git@github.com:org/repo.git"),
    (Detector::Email, "a..b@example.com"),
    (Detector::Email, ".a@example.com"),
    (Detector::Email, "user@example.c"),
    (Detector::Email, "user@-example.com"),
    (Detector::Phone, "+0 415 555 2671"),
    (Detector::Phone, "+1 415"),                              // truncated
    (Detector::Phone, "+1 415 555 2671 1234 5678"),           // over-long (17 digits)
    (Detector::Phone, "+999 123 456 789"),                    // unassigned country code
    (Detector::Phone, "415-555-2671"),                        // no + and no context word
    (Detector::Phone, "phone 115-555-2671"),                  // NANP area code cannot start with 1
    (Detector::Phone, "phone on 2024-11-23"),                 // a date
    (Detector::Phone, "phone 1234"),                          // too short
    (Detector::Phone, "C++14 compiler"),
    (Detector::Phone, "1+2345678901"),
    (Detector::BitcoinAddress, "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNb"), // checksum
    (Detector::BitcoinAddress, "1A1zP1eP5QGefi2DMPTfTL5SLmv7Divf"),   // truncated
    (Detector::BitcoinAddress, "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNaa"), // over-long
    (Detector::BitcoinAddress, "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t5"),
    (Detector::BitcoinAddress, "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3"),
    (Detector::BitcoinAddress, "bC1QW508D6QEJXTDG4Y5R3ZARVARY0C5XW7KV8F3T4"), // mixed case
    (Detector::BitcoinAddress, "tb1qw508d6qejxtdg4y5r3zarvary0c5xw7kxpjzsx"), // testnet
    (Detector::EthereumAddress, "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD"), // EIP-55 wrong case
    (Detector::EthereumAddress, "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"), // no context word
    (Detector::EthereumAddress, "wallet 0x5aaeb6053f3e94c9b9a09f33669435e7ef1beae"), // truncated
    (Detector::EthereumAddress, "wallet 0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed0"), // over-long
    (Detector::EthereumAddress, "tx 0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b"), // a tx hash
    (Detector::SortCodeAccount, "sort code 20-00-00"),                          // no account number
    (Detector::SortCodeAccount, "account 12345678, branch 20-00-00"),           // no sort code word
    (Detector::SortCodeAccount, "sort code 00-00-00, account 12345678"),        // all zero
    (Detector::SortCodeAccount, "sort code 20-00-00, account 1234567"),         // 7 digits
    (Detector::SortCodeAccount, "sort code 20-00-00, account 123456789"),       // 9 digits
    (Detector::SortCodeAccount, "sort code 20-00-00-11, account 12345678"),     // a longer number
    (Detector::SortCodeAccount, "sort the code by date 2024-01-15, account 12345678"), // a date, no sort code
    (Detector::SortCodeAccount, "sort code 20-00-00, ticket 12345678"),         // no account word, not right after
    (Detector::PassportNumber, "123456789"),                                    // no keyword
    (Detector::PassportNumber, "passport no. 12345678"),                        // 8 digits
    (Detector::PassportNumber, "passport no. 1234567890"),                      // 10 digits
    (Detector::PassportNumber, "passport.js 0.7.0 and passport-jwt 4.0.1"),    // a library
    (Detector::PassportNumber, "passport photo taken 2024-01-15"),             // a date
    (Detector::PassportNumber, "passport ab1234567"),                           // lower case
    (Detector::PassportNumber, "the passport office is closed; ticket 123456789 is unrelated to it at all"), // too far
    (Detector::NameDobAddress, "Mr John Smith lives at 12 Acacia Avenue, Leeds"),       // no date of birth
    (Detector::NameDobAddress, "Mr John Smith, DOB 14/03/1982"),                       // no address
    (Detector::NameDobAddress, "born 14/03/1982 at 12 Acacia Avenue"),                 // no name
    (Detector::NameDobAddress, "Mr John Smith, DOB 31/02/1982, 12 Acacia Avenue"),     // no 31 February
    (Detector::NameDobAddress, "Mr John Smith, DOB 14/03/1882, 12 Acacia Avenue"),     // no 1882
    (Detector::NameDobAddress, "Mr Smith met us on 2024-01-15 at 12 Acacia Avenue"),   // a date, not of birth
    (Detector::PemPrivateKey, "-----BEGIN PUBLIC KEY-----"),
    (Detector::PemPrivateKey, "-----BEGIN CERTIFICATE-----"),
    (Detector::AwsAccessKey, "AKIAIOSFODNN7EXAMPL"),            // truncated
    (Detector::AwsAccessKey, "AKIAIOSFODNN7EXAMPLEX"),          // over-long
    (Detector::AwsAccessKey, "AKIA1OSFODNN7EXAMPLE"),           // 1 is not base32
    (Detector::AwsAccessKey, "xAKIAIOSFODNN7EXAMPLE"),
    (Detector::AwsAccessKey, "akiaIOSFODNN7EXAMPLE"),
    (Detector::Jwt, "eyJhbGciOi.eyJzdWIi.sig"),                 // header is not JSON
    (Detector::Jwt, "eyJub3RhbGciOiJ4In0.eyJzdWIiOiIxIn0.sig"), // JSON without alg
    (Detector::GithubToken, "ghp_u8jzPde0IgxLd6GncfBAepfJBd0Kh8024xXI"), // CRC32
    (Detector::GithubToken, "ghp_u8jzPde0IgxLd6GncfBAepfJBd0Kh8024xX"),  // truncated
    (Detector::GithubToken, "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H"), // over-long
    (Detector::GithubToken, "ghx_u8jzPde0IgxLd6GncfBAepfJBd0Kh8024xXH"),
    (Detector::GithubToken, "github_pat_short_token"),
    (Detector::SlackToken, "xoxb-123"),
    (Detector::SlackToken, "xoxz-123456789012-1234567890123-AbCdEfGh"),
    (Detector::SlackToken, "the xoxo-gossip-girl-episode"),
    (Detector::StripeKey, "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    (Detector::StripeKey, "sk_live_short"),
    (Detector::StripeKey, "ask_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (Detector::GoogleApiKey, "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQ"),   // truncated
    (Detector::GoogleApiKey, "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQeX"), // over-long
    (Detector::UrlCredentials, "https://example.com/@user:foo"),
    (Detector::UrlCredentials, "ssh://git@github.com/org/repo"),
    (Detector::UrlCredentials, "https://user:@example.com"),
    (Detector::UrlCredentials, "https://user:pass@"),
];

/// Benign text of agent memories that must not fire any detector.
const LOOK_ALIKES: &[&str] = &[
    "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed the retry",
    "merged 3f2a9c1 into main",
    "request id 123e4567-e89b-12d3-a456-426614174000 timed out",
    "ran at 2026-11-23T17:05:31.123456Z and 2026-11-23 17:05",
    "on 2024-01-15, 15/01/2024 and 01/15/2024",
    "order ORD-2024-004512 shipped; invoice INV-000123456 paid",
    "order #1234567890123 and invoice 20241123001",
    "upgraded to v1.2.3 then 10.4.15-rc.1 and 2.0.0+build.5",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "md5 d41d8cd98f00b204e9800998ecf8427e",
    "amounts 1,234.56 USD and EUR 9 876,54 and $12,345,678.90",
    "ticket JIRA-4521 and PR #8812 reference C++17 and a+b",
    "tracking 1Z999AA10123456784 and room 415 555 2671",
    "@bob pinged @alice about the build at build@3.1.4",
    "the object id 0x7ffd5e8a2b10 leaked; addr 0x00000000",
    "token budget 4096, temperature 0.7, top_p 0.95",
    "order 4111111111111111 is not a card here? it is",
    // Issue 46: dates, numbers and addresses alone.
    "Sprint review 2024-01-15: shipped 3 Main Points; account 12345678 was migrated",
    "Office at 12 Acacia Avenue, Leeds LS1 4AB; opened on 14/03/1982",
    "Mr Smith approved the refund on 2026-11-23; sort order 20-00-00 by date",
    "the passport library 0.7.0 was upgraded; 123456789 rows copied",
    "Jane Smith reviewed PR 4521 on 03/04/2025 at the Leeds office",
    "birthday party for the team on 2025-06-01 at 10 Downing Street",
];

#[test]
fn valid_samples_fire() {
    for &(d, text) in VALID {
        assert!(fires(d, text), "{} should fire on {text:?}", d.name());
        // And classification raises to the detector's tier (or higher) with detectors on.
        let c = classify(text.as_bytes(), &[], None, Set::all());
        assert!(c.tier >= d.tier(), "{} on {text:?}: {:?}", d.name(), c);
        let e = explain(text.as_bytes(), &[], None, Set::all());
        assert!(e.detectors.contains(d), "explain names {} for {text:?}", d.name());
    }
}

#[test]
fn invalid_samples_do_not_fire() {
    for &(d, text) in INVALID {
        assert!(!fires(d, text), "{} must not fire on {text:?}", d.name());
    }
}

#[test]
fn look_alikes_fire_nothing_but_the_real_card() {
    for text in LOOK_ALIKES {
        let found = find(text, Set::all());
        if text.contains("4111111111111111") {
            assert_eq!(found.names(), vec!["card_number"]);
        } else {
            assert!(found.is_empty(), "{text:?} fired {:?}", found.names());
        }
    }
}

#[test]
fn every_detector_has_a_valid_and_an_invalid_sample() {
    for d in Detector::ALL {
        assert!(VALID.iter().any(|(v, _)| *v == d), "valid sample for {}", d.name());
        assert!(INVALID.iter().any(|(v, _)| *v == d), "invalid sample for {}", d.name());
        assert_eq!(Detector::parse(d.name()), Some(d));
        assert!(!d.validation().is_empty());
    }
    assert_eq!(Detector::parse("nope"), None);
}

/// Issue 46: each part of the name + date of birth + address combination, alone and in pairs,
/// fires nothing; the three together do.
#[test]
fn quasi_identifier_needs_all_three() {
    let name = "Ms Priya Patel";
    let dob = "DOB 29/02/1984";
    let address = "4 Privet Drive, Little Whinging";
    let all = format!("{name}, {dob}, {address}");
    assert!(fires(Detector::NameDobAddress, &all));
    assert_eq!(classify(all.as_bytes(), &[], None, Set::all()).rule, Rule::Detector(Detector::NameDobAddress));
    for t in [name.to_string(), dob.to_string(), address.to_string(), format!("{name}, {dob}"), format!("{name}, {address}"), format!("{dob}, {address}")] {
        assert!(!fires(Detector::NameDobAddress, &t), "{t:?}");
        assert_eq!(classify(t.as_bytes(), &[], None, Set::all()).tier, Tier::Internal, "{t:?}");
    }
    // 29 February exists only in leap years.
    assert!(!fires(Detector::NameDobAddress, "Ms Priya Patel, DOB 29/02/1983, 4 Privet Drive"));
    // The name marks: a title, `name:`, capitalised words right before the birth keyword.
    assert!(fires(Detector::NameDobAddress, "Priya Patel, who was born on 14 March 1984, lives at 4 Privet Drive"));
    assert!(fires(Detector::NameDobAddress, "Full name: Priya Patel. Birth date 1984-03-14. Postcode SW1A 1AA"));
    // The date must follow its keyword closely (fillers and a place at most) or stand right before it.
    assert!(fires(Detector::NameDobAddress, "Priya Patel, born in Leeds on 14 March 1984, 4 Privet Drive"));
    assert!(fires(Detector::NameDobAddress, "Mr Priya Patel 14/03/1984 (DOB), 4 Privet Drive"));
    assert!(!fires(Detector::NameDobAddress, "Feature born from ticket JIRA-4521 on 2024-05-01; demoed at 12 High Street by Mr Smith"));
    assert!(!fires(Detector::NameDobAddress, "Mr Smith, 14/03/1984 was the day the DOB field shipped, 4 Privet Drive"));
    // Lower-case words are no name, a capitalised word alone is none either.
    assert!(!fires(Detector::NameDobAddress, "the customer, born 1984-03-14, lives at 4 Privet Drive"));
    assert!(!fires(Detector::NameDobAddress, "Customer, born 1984-03-14, lives at 4 Privet Drive"));
}

#[test]
fn identity_validators_on_their_own() {
    assert!(birth_date_valid(1984, 2, 29) && !birth_date_valid(1983, 2, 29) && !birth_date_valid(1900, 2, 29));
    assert!(birth_date_valid(2000, 2, 29) && !birth_date_valid(1899, 1, 1) && !birth_date_valid(1990, 13, 1));
    assert!(!birth_date_valid(1990, 4, 31) && birth_date_valid(1990, 12, 31) && !birth_date_valid(1990, 1, 0));
    for w in ["123456789", "A12345678", "K1234567", "YA1234567", "GA302922", "AAA123456", "12AB34567", "C01X00T47"] {
        assert!(passport_shape(w.as_bytes()), "{w}");
    }
    for w in ["12345678", "1234567890", "ABCD12345", "a12345678", "CAFE12345", "C0AX00T47", "CHKLMNTRV", "1A2345678"] {
        assert!(!passport_shape(w.as_bytes()), "{w}");
    }
}

/// The three parts of a quasi-identifier, generated: valid dates of birth in every written form,
/// names by each mark, street lines and postcodes.
fn birth_date() -> impl Strategy<Value = String> {
    (1900u32..2030, 1u32..13, 1u32..29, 0usize..5).prop_map(|(y, m, d, form)| {
        let month = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"][m as usize - 1];
        match form {
            0 => format!("{y}-{m:02}-{d:02}"),
            1 => format!("{d:02}/{m:02}/{y}"),
            2 => format!("{d}.{m}.{y}"),
            3 => format!("{d} {month} {y}"),
            _ => format!("{month} {d}, {y}"),
        }
    })
}

fn person() -> impl Strategy<Value = String> {
    (prop::sample::select(vec!["Mr", "Mrs", "Ms", "Dr", "Prof"]), "[A-Z][a-z]{2,8}", "[A-Z][a-z]{2,9}")
        .prop_map(|(title, first, last)| format!("{title} {first} {last}"))
}

fn street() -> impl Strategy<Value = String> {
    (1u32..2000, "[A-Z][a-z]{3,9}", prop::sample::select(vec!["Street", "Road", "Avenue", "Lane", "Close", "Way"]))
        .prop_map(|(n, name, suffix)| format!("{n} {name} {suffix}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    // Together the three parts fire the combination; any two of them, with the same dates written
    // without a birth keyword, never do.
    #[test]
    fn quasi_identifier_is_the_three_parts(p in person(), d in birth_date(), s in street(), which in 0usize..3) {
        let all = format!("{p}, born {d}, lives at {s}.");
        prop_assert!(fires(Detector::NameDobAddress, &all), "{:?}", all);
        let two = match which {
            0 => format!("{p} lives at {s}."),
            1 => format!("{p}, born {d}."),
            _ => format!("Born {d}, lives at {s}."),
        };
        prop_assert!(!fires(Detector::NameDobAddress, &two), "{:?}", two);
        let dated = format!("{p} visited {s} on {d}.");
        prop_assert!(!fires(Detector::NameDobAddress, &dated), "{:?}", dated);
    }

    // A sort code and an account number, each alone, never fire; together, marked, they do.
    #[test]
    fn sort_code_needs_its_account(a in 0u32..100, b in 0u32..100, c in 1u32..100, acct in 10_000_000u32..100_000_000) {
        let code = format!("{a:02}-{b:02}-{c:02}");
        let both = format!("sort code {code}, account {acct}");
        let alone = format!("sort code {code}");
        let unmarked = format!("account {acct} opened {code}");
        prop_assert!(fires(Detector::SortCodeAccount, &both), "{:?}", both);
        prop_assert!(!fires(Detector::SortCodeAccount, &alone), "{:?}", alone);
        prop_assert!(!fires(Detector::SortCodeAccount, &unmarked), "{:?}", unmarked);
    }

    // A passport-shaped number fires only after its keyword.
    #[test]
    fn passport_needs_its_keyword(n in 100_000_000u32..1_000_000_000) {
        let passport = format!("passport no. {n}");
        let order = format!("order no. {n}");
        prop_assert!(fires(Detector::PassportNumber, &passport), "{:?}", passport);
        prop_assert!(!fires(Detector::PassportNumber, &order), "{:?}", order);
    }
}

#[test]
fn context_words_must_be_near() {
    let far = format!("routing {} 021000021", "x ".repeat(40));
    assert!(!fires(Detector::AbaRouting, &far));
    assert!(fires(Detector::AbaRouting, "021000021 (routing)"));
    assert!(!fires(Detector::AbaRouting, "reroutings 021000021"));
    assert!(!fires(Detector::Phone, "telephony 415-555-2671"));
    assert!(fires(Detector::Phone, "Tel: 415-555-2671"));
}

#[test]
fn validators_on_their_own() {
    assert!(iban_valid(b"GB82WEST12345698765432"));
    assert!(!iban_valid(b"GB82WEST1234569876543"));
    assert!(aba_valid(b"021000021") && !aba_valid(b"021000022") && !aba_valid(b"12345678"));
    assert!(eip55_valid(b"5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"));
    assert!(!eip55_valid(b"5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD"));
    assert_eq!(&github_checksum(b"u8jzPde0IgxLd6GncfBAepfJBd0Kh8"), b"024xXH");
    assert!(ssn_valid(b"123-45-6789") && !ssn_valid(b"666-45-6789"));
    assert!(card_issuer_valid(&[4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]));
    assert!(!card_issuer_valid(&[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]));
    assert!(base58check_address_valid(b"1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa"));
    assert!(bech32_address_valid(b"bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"));
    assert!(jwt_valid(b"eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0."));
}

#[test]
fn tiers_and_rule_names() {
    let c = classify(b"mail jane@example.com", &[], None, Set::all());
    assert_eq!((c.tier, c.rule.name()), (Tier::Restricted, "detector_email".to_string()));
    let c = classify(b"key sk_live_4eC39HqLyjWDarjtT1zdp7dc", &[], None, Set::all());
    assert_eq!((c.tier, c.rule.name()), (Tier::Confidential, "detector_stripe_key".to_string()));
    // The first generation set does not know the new detectors.
    let c = classify(b"mail jane@example.com", &[], None, Set::first_generation());
    assert_eq!(c.rule, Rule::Default);
    // A restricted detector outranks a confidential path.
    let c = classify(b"jane@example.com", &["secrets/x"], None, Set::all());
    assert_eq!(c.rule, Rule::Detector(Detector::Email));
}

// --- Folding and evasion --------------------------------------------------------------------

/// Full-width form of ASCII letters and digits (U+FF01..U+FF5E).
fn fullwidth(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { char::from_u32(c as u32 - 0x21 + 0xFF01).unwrap() } else { c }).collect()
}

fn interleave(s: &str, with: char) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 {
            out.push(with);
        }
        out.push(c);
    }
    out
}

const INVISIBLES: [char; 5] = ['\u{200B}', '\u{200C}', '\u{200D}', '\u{00AD}', '\u{FEFF}'];

#[test]
fn evasion_forms_classify_like_plain_forms() {
    let samples: Vec<&str> = VALID.iter().map(|(_, t)| *t).chain(["my ssn", "the password", "credit card", "api-key"]).collect();
    for text in samples {
        let plain = classify(text.as_bytes(), &[], None, Set::all());
        let wide = fullwidth(text);
        assert_eq!(classify(wide.as_bytes(), &[], None, Set::all()).tier, plain.tier, "full-width {text:?}");
        for z in INVISIBLES {
            let hidden = interleave(text, z);
            let c = classify(hidden.as_bytes(), &[], None, Set::all());
            assert_eq!((c.tier, &c.rule), (plain.tier, &plain.rule), "{z:?} inside {text:?}");
        }
    }
    // The issue's own examples.
    assert_eq!(classify("ｓｓｎ".as_bytes(), &[], None, Set::all()).tier, Tier::Restricted);
    assert_eq!(classify("s\u{200B}sn".as_bytes(), &[], None, Set::all()).tier, Tier::Restricted);
    assert_eq!(classify("４１１１ １１１１ １１１１ １１１１".as_bytes(), &[], None, Set::all()).tier, Tier::Restricted);
    assert_eq!(classify("１２３－４５－６７８９".as_bytes(), &[], None, Set::all()).rule, Rule::Detector(Detector::Ssn));
    assert_eq!(classify("credit\u{00A0}card".as_bytes(), &[], None, Set::all()).tier, Tier::Restricted);
}

#[test]
fn folded_paths_match_their_segments() {
    let c = classify(b"x", &["src/\u{FF41}\u{FF55}\u{FF54}\u{FF48}/x.ts"], None, Set::all());
    assert_eq!(c.rule, Rule::ConfidentialPath);
    let c = classify(b"x", &["app/.e\u{200B}nv"], None, Set::all());
    assert_eq!(c.rule, Rule::ConfidentialPath);
    let c = classify(b"x", &["ｄｏｃｓ/a.md"], None, Set::all());
    assert_eq!(c.rule, Rule::PublicPaths);
}

#[test]
fn evidence_is_what_the_writer_wrote() {
    let e = explain("my ｓｓｎ is".as_bytes(), &[], None, Set::all());
    assert_eq!(e.evidence.as_deref(), Some("ｓｓｎ"));
    let e = explain("the pass\u{200B}word".as_bytes(), &[], None, Set::all());
    assert_eq!(e.evidence.as_deref(), Some("pass\u{200B}word"));
    let e = explain(b"the PASSWORD", &[], None, Set::all());
    assert_eq!(e.evidence.as_deref(), Some("password"));
    // A detector's value never appears in an explanation.
    let e = explain(b"mail jane@example.com", &[], None, Set::all());
    assert_eq!(e.evidence, None);
    assert_eq!(e.detectors.names(), vec!["email"]);
}

#[test]
fn folding_leaves_plain_text_alone() {
    for t in ["plain ascii", "café", "中文内容 and ssn", "naïve 123"] {
        assert!(!crate::fold::fold(t).changed(), "{t:?}");
    }
    for t in ["ｓｓｎ", "a\u{200B}b", "ﬁle", "x\u{00A0}y"] {
        assert!(crate::fold::fold(t).changed(), "{t:?}");
    }
}

fn fragment() -> impl Strategy<Value = String> {
    let mut samples: Vec<String> = VALID.iter().chain(INVALID).map(|(_, t)| t.to_string()).collect();
    samples.extend(LOOK_ALIKES.iter().map(|s| s.to_string()));
    samples.extend(
        ["ssn", "password", "audit", "routing", "phone", "wallet", "address", "tel", "@", "+", "://", "0x", "bc1", "AKIA", "gh", "xoxb-", "sk_live_", "AIza", "DE89", "eyJ", "-----BEGIN ",
         "passport no.", "sort code", "Sortcode", "account", "20-00-00", "12345678", "123456789", "Mr John Smith", "name: Jane Doe", "Jane Smith",
         "born", "DOB", "D.O.B.", "14/03/1982", "1982-03-14", "14 March 1982", "12 Acacia Avenue", "LS1 4AB"]
            .iter()
            .map(|s| s.to_string()),
    );
    prop_oneof![
        prop::sample::select(samples),
        "[a-zA-Z0-9 _.:@+/()-]{0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    // The gated fast path agrees with the reference (every detector run unconditionally) on
    // mixes of valid and invalid detector inputs, look-alikes, context words and noise.
    #[test]
    fn gated_fast_path_matches_reference(
        parts in prop::collection::vec(fragment(), 0..6),
        seps in prop::collection::vec(prop_oneof![Just(" "), Just(""), Just("_"), Just("-"), Just("\n"), Just(", "), Just("é")], 6),
        first_gen in any::<bool>(),
    ) {
        let mut content = String::new();
        for (i, p) in parts.iter().enumerate() {
            content.push_str(p);
            content.push_str(seps[i % seps.len()]);
        }
        let set = if first_gen { Set::first_generation() } else { Set::all() };
        let fast = classify(content.as_bytes(), &[], None, set);
        let reference = classify_reference(content.as_bytes(), &[], None, set);
        prop_assert_eq!((fast.tier, &fast.rule), (reference.tier, &reference.rule), "content {:?}", content);
    }

    // Differential: text without folding-relevant characters is scanned as written (folding
    // borrows it), so the result equals the plain scanner's on the same bytes.
    #[test]
    fn no_folding_relevant_characters_means_plain_scan(
        parts in prop::collection::vec(fragment(), 0..6),
        extra in "[a-zé中 ]{0,6}",
    ) {
        let content = format!("{}{}", parts.join(" "), extra);
        let folded = crate::fold::fold(&content);
        prop_assert!(!folded.changed());
        let plain = crate::classify::classify_plain(content.as_bytes(), Set::all());
        let full = classify(content.as_bytes(), &[], None, Set::all());
        prop_assert_eq!((plain.tier, &plain.rule), (full.tier, &full.rule));
    }

    // Evasion: invisible characters anywhere and full-width letters and digits do not change
    // what a text classifies as.
    #[test]
    fn invisible_and_fullwidth_characters_change_nothing(
        parts in prop::collection::vec(fragment(), 1..4),
        z in prop::sample::select(INVISIBLES.to_vec()),
        every in 1usize..5,
    ) {
        let content = parts.join(" ");
        let plain = classify(content.as_bytes(), &[], None, Set::all());
        let mut hidden = String::new();
        for (i, c) in content.chars().enumerate() {
            hidden.push(c);
            if i % every == 0 {
                hidden.push(z);
            }
        }
        let h = classify(hidden.as_bytes(), &[], None, Set::all());
        prop_assert_eq!((h.tier, &h.rule), (plain.tier, &plain.rule), "{:?}", hidden);
        let w = classify(fullwidth(&content).as_bytes(), &[], None, Set::all());
        prop_assert_eq!(w.tier, plain.tier, "{:?}", content);
    }

    #[test]
    fn detectors_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = find_folded(&bytes, Set::all());
        let _ = classify(&bytes, &["x"], None, Set::all());
    }
}

/// Inputs built to make a detector read the same bytes again and again. Each detector reads every
/// byte a bounded number of times (runs are skipped once read), so these finish like any text of
/// their size; a quadratic scan would not finish in the test run. No timing is asserted.
#[test]
fn adversarial_inputs_are_read_in_linear_passes() {
    let n = 200_000;
    let inputs = [
        format!("phone {}x", "1 ".repeat(n)),
        format!("phone {}", "(1) 2-".repeat(n / 6)),
        format!("+{}", "1 ".repeat(n)),
        "xoxb-".repeat(n / 5),
        "a@".repeat(n / 2),
        format!("{}@example.com", "a.".repeat(n / 2)),
        format!("x://{}", "a:".repeat(n / 2)),
        "0x".repeat(n / 2),
        format!("routing {}", "021000021 ".repeat(n / 10)),
        "GB82 ".repeat(n / 5),
        "eyJ.".repeat(n / 4),
        "AIza".repeat(n / 4),
        "ghp_".repeat(n / 4),
        "sk_live_".repeat(n / 8),
        "1".repeat(n),
        "\u{200B}ｓ".repeat(n / 2),
        "passport ".repeat(n / 9),
        format!("sort code {}", "20-00-00 ".repeat(n / 9)),
        format!("account {}", "12345678 20-00-00 sort code ".repeat(n / 28)),
        "born DOB d.o.b 14/03/1982 ".repeat(n / 26),
        "Mr Jane Smith Jones born ".repeat(n / 25),
        "12 Acacia Acacia Acacia ".repeat(n / 24),
        "name: Jane name: ".repeat(n / 17),
    ];
    for text in &inputs {
        let _ = find(text, Set::all());
        let _ = classify(text.as_bytes(), &[], None, Set::all());
        let _ = classify_reference(text.as_bytes(), &[], None, Set::all());
    }
}

/// Every span the card pattern finds, by the scanner and by the regex it stands for.
fn card_spans_both(t: &[u8]) -> (Vec<(usize, usize)>, Vec<(usize, usize)>) {
    let mut scanned = Vec::new();
    card_spans(t, |m| {
        let start = m.as_ptr() as usize - t.as_ptr() as usize;
        scanned.push((start, start + m.len()));
        false
    });
    let regex = CARD.find_iter(t).map(|m| (m.start(), m.end())).collect();
    (scanned, regex)
}

#[test]
fn card_scanner_is_the_card_pattern_on_edges() {
    for t in [
        "", "4111111111111111", "x4111111111111111", "4111111111111111x", "_4111111111111111", "4111 1111 1111 1111",
        "4111-1111-1111-1117-", "1234567890123-4x", "12345678901234567890", "1234567890123456789", "1 2 3 4 5 6 7 8 9 0 1 2 3 4",
        "123456789012 -3", "1234567890123  4", "note 0.123456789012345 and 99999999999999999999 a 1234567890123", "é4111111111111111é",
        "1111111111111-1111111111111 2222222222222", "--1234567890123--", "12345678901234567890123456789012345678",
    ] {
        let (s, r) = card_spans_both(t.as_bytes());
        assert_eq!(s, r, "{t:?}");
    }
}

proptest! {
    #[test]
    fn card_scanner_is_the_card_pattern(t in "[0-9 \\-a_.é]{0,60}") {
        let (s, r) = card_spans_both(t.as_bytes());
        prop_assert_eq!(s, r);
    }

    #[test]
    fn card_scanner_is_the_card_pattern_on_digit_runs(t in "([0-9]{1,25}[ \\-x]{0,2}){0,5}") {
        let (s, r) = card_spans_both(t.as_bytes());
        prop_assert_eq!(s, r);
    }
}

/// Issue 34 item 12: a number followed by a parenthesised word (`(mobile)`, `(work)`) was read as
/// a phone run that went on into the parenthesis and, finding no digits there, was dropped whole.
#[test]
fn phone_followed_by_a_parenthesised_word() {
    for t in [
        "call my phone 415-555-2671 (mobile)",
        "phone: 415 555 2671 (work)",
        "phone 415.555.2671(home)",
        "415-555-2671 (mobile)",
        "mobile: (415) 555-2671 (after 6pm)",
        "call +1 415 555 2671 (cell)",
        "+14155552671 (whatsapp)",
        "tel 07911 123456 ()",
        "phone 415-555-2671 (",
        // A parenthesised group followed by a space and the next group is one run too.
        "+1 (415) 555-2671",
        "mobile (415)555-2671 (evenings)",
    ] {
        assert!(fires(Detector::Phone, t), "{t:?}");
    }
    for t in [
        "415-555-2671 (order)",          // no phone word
        "phone 115-555-2671 (work)",     // NANP area code cannot start with 1
        "phone on 2024-11-23 (monday)",  // a date
        "phone 1234 (short)",
    ] {
        assert!(!fires(Detector::Phone, t), "{t:?}");
    }
}
