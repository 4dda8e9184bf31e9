//! Persona drift rules (docs/design.md#consent-and-drift): the polarity of a rating and of
//! a comment (by the editable lexicon), the keyword set of a thesis and its Jaccard similarity,
//! the detectors' thresholds, and each detector's decision once its one earlier row is known.
//!
//! The extension's trigger (`src/drift.rs`) reads the earlier rows and writes what is found; every
//! comparison lives here. The earlier rows are always the same user's in the same org (each
//! detector's lookup is keyed by org, user, then the object): one user's activity never makes
//! another user's drift.

/// Polarity of a rating: +1 for `thumbs_up` and `agree`, -1 for `not_helpful` and `disagree`.
pub fn rating_polarity(rating: &str) -> Option<i16> {
    match rating {
        "thumbs_up" | "agree" => Some(1),
        "not_helpful" | "disagree" => Some(-1),
        _ => None,
    }
}

/// The feedback lexicon (`memory.drift_lexicon`): words and their polarity.
///
/// A word of lower-case ASCII letters, digits and `_` matches a comment where it stands as a whole
/// word of the lower-cased comment (neither neighbour a letter, digit or `_`); any other word
/// (`错`, `not helpful`) matches anywhere in the comment as written. Each word counts once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lexicon {
    words: Vec<(String, bool, i16)>,
}

impl Lexicon {
    /// A lexicon of `(word, polarity)` pairs; polarities other than -1 and 1 are ignored (the
    /// table's CHECK refuses them).
    pub fn new<S: AsRef<str>>(entries: impl IntoIterator<Item = (S, i16)>) -> Lexicon {
        let words = entries
            .into_iter()
            .filter(|(_, p)| *p == 1 || *p == -1)
            .map(|(w, p)| {
                let w = w.as_ref().to_string();
                let whole = !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                (w, whole, p)
            })
            .collect();
        Lexicon { words }
    }

    /// The sign of the matched words' polarities; None when no word matches or they cancel out.
    pub fn polarity(&self, comment: &str) -> Option<i16> {
        let mut lower: Option<String> = None;
        let mut sum: i64 = 0;
        for (word, whole, p) in &self.words {
            let hit = if *whole {
                let l = lower.get_or_insert_with(|| comment.to_lowercase());
                contains_word(l, word)
            } else {
                !word.is_empty() && comment.contains(word.as_str())
            };
            if hit {
                sum += *p as i64;
            }
        }
        match sum.signum() {
            0 => None,
            s => Some(s as i16),
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `word` occurs in `text` with no word character on either side.
fn contains_word(text: &str, word: &str) -> bool {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let start = from + i;
        let end = start + word.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        if !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char) {
            return true;
        }
        // The next candidate starts after this one's first character.
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// The keyword set of a thesis: its lower-cased words (runs of letters and digits) of at least
/// two characters, sorted, each once.
pub fn thesis_words(thesis: &str) -> Vec<String> {
    let lower = thesis.to_lowercase();
    let mut words: Vec<String> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_string)
        .collect();
    words.sort_unstable();
    words.dedup();
    words
}

/// Jaccard similarity of two sorted, deduplicated word sets; 1 when both are empty.
pub fn jaccard(a: &[String], b: &[String]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    common as f64 / (a.len() + b.len() - common) as f64
}

/// The detectors' thresholds (`memory.drift_thresholds`; defaults from docs/design.md#consent-and-drift).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub grade_reversal_days: f64,
    pub feedback_conflict_min: f64,
    pub refresh_changed_inferences_min: f64,
    pub refresh_lookback_days: f64,
    pub refresh_jaccard_max: f64,
    pub watch_reopen_days: f64,
    pub watch_reopen_min_hours: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            grade_reversal_days: 14.0,
            feedback_conflict_min: 2.0,
            refresh_changed_inferences_min: 5.0,
            refresh_lookback_days: 14.0,
            refresh_jaccard_max: 0.2,
            watch_reopen_days: 14.0,
            watch_reopen_min_hours: 1.0,
        }
    }
}

impl Thresholds {
    /// Every threshold missing (NaN): what the detectors start from when reading
    /// `memory.drift_thresholds`; a threshold missing from the table turns its detector off.
    pub fn missing() -> Self {
        Thresholds {
            grade_reversal_days: f64::NAN,
            feedback_conflict_min: f64::NAN,
            refresh_changed_inferences_min: f64::NAN,
            refresh_lookback_days: f64::NAN,
            refresh_jaccard_max: f64::NAN,
            watch_reopen_days: f64::NAN,
            watch_reopen_min_hours: f64::NAN,
        }
    }

    /// Sets the threshold called `name`; false for a name no detector reads (the alert
    /// thresholds are the view's).
    pub fn set(&mut self, name: &str, value: f64) -> bool {
        let slot = match name {
            "grade_reversal_days" => &mut self.grade_reversal_days,
            "feedback_conflict_min" => &mut self.feedback_conflict_min,
            "refresh_changed_inferences_min" => &mut self.refresh_changed_inferences_min,
            "refresh_lookback_days" => &mut self.refresh_lookback_days,
            "refresh_jaccard_max" => &mut self.refresh_jaccard_max,
            "watch_reopen_days" => &mut self.watch_reopen_days,
            "watch_reopen_min_hours" => &mut self.watch_reopen_min_hours,
            _ => return false,
        };
        *slot = value;
        true
    }

    /// A threshold in whole units, as SQL's `numeric::int` rounds it (half away from zero),
    /// saturated to the int range.
    pub fn whole(v: f64) -> i32 {
        let r = v.round();
        if r >= i32::MAX as f64 {
            i32::MAX
        } else if r <= i32::MIN as f64 {
            i32::MIN
        } else {
            r as i32
        }
    }
}

/// Fills a summary template as PostgreSQL's `format(template, a, b)` would for the templates
/// the detectors make: `%1$s` is `a`, `%2$s` is `b` (an absent value is empty, as format shows
/// NULL), `%%` is `%`; anything else is kept as it is.
pub fn fill_summary(template: &str, a: Option<&str>, b: Option<&str>) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("%%") {
            out.push('%');
            rest = t;
        } else if let Some(t) = tail.strip_prefix("%1$s") {
            out.push_str(a.unwrap_or(""));
            rest = t;
        } else if let Some(t) = tail.strip_prefix("%2$s") {
            out.push_str(b.unwrap_or(""));
            rest = t;
        } else {
            out.push('%');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The drift log's id, `drift_<UTC time to the microsecond>Z_<6 hex>`, from Unix microseconds
/// and three random bytes.
pub fn drift_id(unix_micros: i64, random: [u8; 3]) -> String {
    format!("drift_{}_{}", crate::audit::format_timestamp(unix_micros), hex::encode(random))
}

const MICROS_PER_HOUR: i128 = 3_600_000_000;
const MICROS_PER_DAY: i128 = 24 * MICROS_PER_HOUR;

/// grade_reversal: the latest earlier rating of the same object (within the window, which the
/// lookup applies) has the other polarity.
pub fn is_grade_reversal(prior_rating: &str, new_polarity: i16) -> bool {
    rating_polarity(prior_rating).is_some_and(|p| p == -new_polarity)
}

/// feedback_conflict: at least `feedback_conflict_min` earlier comments on the same kind of
/// object point the other way.
pub fn is_feedback_conflict(opposing: i64, t: &Thresholds) -> bool {
    opposing as f64 >= t.feedback_conflict_min
}

/// How many opposing comments the feedback_conflict lookup reads at most: as many as the
/// threshold asks for (at least one, to name the latest), so a user's long history costs nothing.
pub fn conflict_lookups(t: &Thresholds) -> i64 {
    let c = t.feedback_conflict_min.ceil();
    if c.is_nan() || c < 1.0 {
        1
    } else if c > 1e9 {
        1_000_000_000
    } else {
        c as i64
    }
}

/// refresh_stance_flip, first half: more changed inferences than the threshold.
pub fn refresh_may_flip(changed_inferences: i32, t: &Thresholds) -> bool {
    changed_inferences as f64 > t.refresh_changed_inferences_min
}

/// refresh_stance_flip, second half: the thesis shares too few words with the user's own thesis
/// of the thread of at least `refresh_lookback_days` earlier.
pub fn is_stance_flip(prior_thesis: &str, thesis: &str, t: &Thresholds) -> bool {
    jaccard(&thesis_words(prior_thesis), &thesis_words(thesis)) < t.refresh_jaccard_max
}

/// watch_question_resolved_then_reopened: reopened `elapsed_us` after the user's latest resolution
/// of the question, within `watch_reopen_days` and not within the first `watch_reopen_min_hours`
/// (both bounds inclusive).
pub fn is_reopen_drift(elapsed_us: i64, t: &Thresholds) -> bool {
    if t.watch_reopen_days.is_nan() || t.watch_reopen_min_hours.is_nan() {
        return false;
    }
    let e = elapsed_us as i128;
    e <= Thresholds::whole(t.watch_reopen_days) as i128 * MICROS_PER_DAY
        && e >= Thresholds::whole(t.watch_reopen_min_hours) as i128 * MICROS_PER_HOUR
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn starter() -> Lexicon {
        // The starter words, as memory.drift_lexicon ships them.
        Lexicon::new([("thumbs_up", 1), ("not_helpful", -1), ("agree", 1), ("disagree", -1), ("对", 1), ("错", -1)])
    }

    #[test]
    fn ratings_have_the_seeds_polarity() {
        assert_eq!(rating_polarity("thumbs_up"), Some(1));
        assert_eq!(rating_polarity("agree"), Some(1));
        assert_eq!(rating_polarity("not_helpful"), Some(-1));
        assert_eq!(rating_polarity("disagree"), Some(-1));
        assert_eq!(rating_polarity("meh"), None);
        assert_eq!(rating_polarity("Agree"), None);
    }

    #[test]
    fn lexicon_words_match_whole_words_of_the_lower_cased_comment() {
        let l = starter();
        assert_eq!(l.polarity("I agree with the thesis"), Some(1));
        assert_eq!(l.polarity("I AGREE."), Some(1));
        assert_eq!(l.polarity("I disagree with the thesis"), Some(-1), "disagree is a word of its own, agree inside it is not");
        assert_eq!(l.polarity("agree, mostly"), Some(1));
        assert_eq!(l.polarity("agreed"), None, "not inside a longer word");
        assert_eq!(l.polarity("_agree"), None, "_ is a word character");
        assert_eq!(l.polarity("agree_"), None);
        assert_eq!(l.polarity("déagree"), None, "letters beyond ASCII are word characters too");
        assert_eq!(l.polarity("agree disagree"), None, "opposite words cancel out");
        assert_eq!(l.polarity("agree agree disagree"), None, "each word counts once");
        assert_eq!(l.polarity("was not_helpful"), Some(-1));
        assert_eq!(l.polarity(""), None);
        assert_eq!(l.polarity("nothing to see"), None);
    }

    #[test]
    fn other_words_match_anywhere_as_written() {
        let l = starter();
        assert_eq!(l.polarity("这个判断错了"), Some(-1));
        assert_eq!(l.polarity("说得对"), Some(1));
        assert_eq!(l.polarity("对,但是错了"), None);
        let l = Lexicon::new([("Not Helpful", -1)]);
        assert_eq!(l.polarity("this was Not Helpful at all"), Some(-1), "written case is kept for such words");
        assert_eq!(l.polarity("this was not helpful at all"), None);
    }

    #[test]
    fn a_later_candidate_after_a_failed_one_still_matches() {
        let l = Lexicon::new([("agree", 1)]);
        assert_eq!(l.polarity("agreeable, but I agree"), Some(1));
        assert_eq!(l.polarity("disagree; agree"), Some(1));
    }

    #[test]
    fn thesis_words_are_lower_cased_words_of_two_or_more_characters() {
        assert_eq!(thesis_words("SOL bullish on unlock demand, staking-steady; a I 2"), vec!["bullish", "demand", "on", "sol", "staking", "steady", "unlock"]);
        assert_eq!(thesis_words("Bearish: bearish BEARISH"), vec!["bearish"]);
        assert!(thesis_words("").is_empty());
        assert_eq!(thesis_words("质押 x"), vec!["质押"]);
    }

    fn words(s: &str) -> Vec<String> {
        thesis_words(s)
    }

    #[test]
    fn jaccard_of_word_sets() {
        assert_eq!(jaccard(&[], &[]), 1.0);
        assert_eq!(jaccard(&words("aa bb"), &[]), 0.0);
        assert_eq!(jaccard(&words("aa bb cc"), &words("bb cc dd")), 0.5);
        assert_eq!(jaccard(&words("aa bb"), &words("aa bb")), 1.0);
    }

    #[test]
    fn stance_flip_boundary_at_a_jaccard_of_one_fifth() {
        let t = Thresholds::default();
        // 19 shared words of 100 (0.19) is a flip; 21 of 100 (0.21) is not.
        // Theses sharing `shared` words, with 100 words between them.
        let pair = |shared: usize| {
            let common: Vec<String> = (0..shared).map(|i| format!("s{i:02}")).collect();
            let own_a = (100 - shared) / 2;
            let a: Vec<String> = common.iter().cloned().chain((0..own_a).map(|i| format!("a{i:02}"))).collect();
            let b: Vec<String> = common.iter().cloned().chain((0..100 - shared - own_a).map(|i| format!("b{i:02}"))).collect();
            (a.join(" "), b.join(" "))
        };
        let (a, b) = pair(19);
        let j = jaccard(&words(&a), &words(&b));
        assert!((j - 19.0 / 100.0).abs() < 1e-9, "{j}");
        assert!(is_stance_flip(&a, &b, &t));
        let (a, b) = pair(21);
        let j = jaccard(&words(&a), &words(&b));
        assert!((j - 21.0 / 100.0).abs() < 1e-9, "{j}");
        assert!(!is_stance_flip(&a, &b, &t));
        // Exactly the threshold is not below it.
        assert!(!is_stance_flip("aa bb cc dd ee", "aa ff gg hh ii jj", &Thresholds { refresh_jaccard_max: 0.1, ..t }));
    }

    #[test]
    fn changed_inferences_boundary() {
        let t = Thresholds::default();
        assert!(!refresh_may_flip(5, &t));
        assert!(refresh_may_flip(6, &t));
    }

    #[test]
    fn reversal_and_conflict_decisions() {
        let t = Thresholds::default();
        assert!(is_grade_reversal("thumbs_up", -1));
        assert!(is_grade_reversal("disagree", 1));
        assert!(!is_grade_reversal("agree", 1));
        assert!(!is_grade_reversal("bogus", 1));
        assert!(!is_feedback_conflict(1, &t));
        assert!(is_feedback_conflict(2, &t));
        assert!(is_feedback_conflict(7, &t));
        assert_eq!(conflict_lookups(&t), 2);
        assert_eq!(conflict_lookups(&Thresholds { feedback_conflict_min: 2.5, ..t }), 3, "2.5 needs three");
        assert!(!is_feedback_conflict(2, &Thresholds { feedback_conflict_min: 2.5, ..t }));
        assert!(is_feedback_conflict(3, &Thresholds { feedback_conflict_min: 2.5, ..t }));
        assert_eq!(conflict_lookups(&Thresholds { feedback_conflict_min: 0.0, ..t }), 1);
        assert_eq!(conflict_lookups(&Thresholds::missing()), 1);
    }

    #[test]
    fn reopen_boundaries() {
        let t = Thresholds::default();
        let min = 60_000_000i64;
        assert!(!is_reopen_drift(30 * min, &t), "30 minutes is too soon");
        assert!(!is_reopen_drift(60 * min - 1, &t));
        assert!(is_reopen_drift(60 * min, &t), "one hour is the inclusive lower bound");
        assert!(is_reopen_drift(120 * min, &t), "two hours");
        assert!(is_reopen_drift(13 * 24 * 60 * min, &t));
        assert!(is_reopen_drift(14 * 24 * 60 * min, &t), "14 days is the inclusive upper bound");
        assert!(!is_reopen_drift(14 * 24 * 60 * min + 1, &t));
        assert!(!is_reopen_drift(15 * 24 * 60 * min, &t));
    }

    #[test]
    fn thresholds_by_name_and_rounding() {
        let mut t = Thresholds::default();
        assert!(t.set("grade_reversal_days", 30.0));
        assert_eq!(t.grade_reversal_days, 30.0);
        assert!(!t.set("alert_min_rows", 3.0));
        assert_eq!(Thresholds::whole(13.5), 14);
        assert_eq!(Thresholds::whole(13.49), 13);
        assert_eq!(Thresholds::whole(1e12), i32::MAX);
    }

    #[test]
    fn missing_thresholds_turn_their_detectors_off() {
        let t = Thresholds::missing();
        assert!(!is_feedback_conflict(1_000, &t));
        assert!(!refresh_may_flip(1_000, &t));
        assert!(!is_stance_flip("aa", "bb", &t));
        assert!(!is_reopen_drift(0, &t));
        assert!(!is_reopen_drift(2 * 3_600_000_000, &t));
    }

    #[test]
    fn summaries_fill_like_format() {
        assert_eq!(fill_summary("%1$s graded agree, then %2$s graded 100%% disagree", Some("2026-01-01"), Some("2026-01-02")),
                   "2026-01-01 graded agree, then 2026-01-02 graded 100% disagree");
        assert_eq!(fill_summary("since %1$s", None, Some("x")), "since ");
        assert_eq!(fill_summary("a %%1$s b", Some("X"), None), "a %1$s b");
        assert_eq!(fill_summary("", Some("X"), None), "");
        assert_eq!(fill_summary("watch question q%%%% resolved %1$s, reopened %2$s", Some("a"), Some("b")),
                   "watch question q%% resolved a, reopened b");
    }

    #[test]
    fn drift_ids_have_the_seeds_shape() {
        // 2026-01-02T03:04:05.000006Z
        let id = drift_id(1_767_323_045_000_006, [0xab, 0x01, 0xff]);
        assert_eq!(id, "drift_2026-01-02T03:04:05.000006Z_ab01ff");
    }

    proptest! {
        #[test]
        fn jaccard_is_symmetric_and_bounded(a in proptest::collection::vec("[a-c]{2}", 0..8), b in proptest::collection::vec("[a-c]{2}", 0..8)) {
            let (a, b) = (words(&a.join(" ")), words(&b.join(" ")));
            let (x, y) = (jaccard(&a, &b), jaccard(&b, &a));
            prop_assert_eq!(x, y);
            prop_assert!((0.0..=1.0).contains(&x));
            prop_assert_eq!(jaccard(&a, &a), 1.0);
        }

        #[test]
        fn polarity_never_panics_and_is_a_sign(s in "\\PC{0,40}") {
            let p = starter().polarity(&s);
            prop_assert!(p.is_none() || p == Some(1) || p == Some(-1));
        }

        #[test]
        fn a_lexicon_word_alone_has_its_polarity(pad_l in "[ ,.!?]{0,3}", pad_r in "[ ,.!?]{0,3}") {
            let l = starter();
            prop_assert_eq!(l.polarity(&format!("{pad_l}disagree{pad_r}")), Some(-1));
            prop_assert_eq!(l.polarity(&format!("{pad_l}Thumbs_Up{pad_r}")), Some(1));
        }
    }
}
