//! How a query's words are matched. Agents send questions ("how does the customer like to
//! pay?"): a memory matching any of the query's words (its lexemes, stop words dropped) is found,
//! ranked by how many of them it has (coverage) and then by `ts_rank_cd`. A query that uses
//! websearch syntax (a quoted phrase, a `-word` exclusion, `or`) is read as PostgreSQL's
//! `websearch_to_tsquery` reads it, every word required unless it says otherwise.

/// The way a query's words are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Any of the query's lexemes, ranked by coverage, then ts_rank_cd.
    AnyWord,
    /// `websearch_to_tsquery` as written.
    Websearch,
}

/// Whether `query` uses websearch syntax: a double quote, a word starting with `-`, or the word
/// `or` between words.
pub fn match_of(query: &str) -> Match {
    if query.contains('"') {
        return Match::Websearch;
    }
    let words: Vec<&str> = query.split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        if w.starts_with('-') && w.len() > 1 {
            return Match::Websearch;
        }
        if w.eq_ignore_ascii_case("or") && i > 0 && i + 1 < words.len() {
            return Match::Websearch;
        }
    }
    Match::AnyWord
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_questions_match_any_word() {
        assert_eq!(match_of("how does the customer like to pay?"), Match::AnyWord);
        assert_eq!(match_of("alpha report"), Match::AnyWord);
        assert_eq!(match_of("e-mail address"), Match::AnyWord);
        assert_eq!(match_of("- dash alone"), Match::AnyWord);
        assert_eq!(match_of("or"), Match::AnyWord);
    }

    #[test]
    fn websearch_syntax_is_honoured() {
        assert_eq!(match_of("\"bank transfer\""), Match::Websearch);
        assert_eq!(match_of("pay -card"), Match::Websearch);
        assert_eq!(match_of("cats or dogs"), Match::Websearch);
        assert_eq!(match_of("cats OR dogs"), Match::Websearch);
    }
}
