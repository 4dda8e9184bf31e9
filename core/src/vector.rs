//! The query embedding of a hybrid recall or retrieval (docs/vector.md), checked before it is
//! compared with anything: of the column's dimensions, every component a finite number, not all
//! zero (cosine distance has no direction for the zero vector). A query embedding comes as
//! numbers (float8[] or real[]: `to_f32`) or as text (pgvector's `[1,2,3]`, an array's `{1,2,3}`:
//! `parse_query_vector`), and goes to pgvector as `format_query_vector`'s text.

/// Why a query embedding is refused; each is a bad argument (22023) with this message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryVectorError {
    #[error("query_embedding has {got} dimensions, the embeddings have {want}")]
    Dimensions { got: usize, want: usize },
    #[error("query_embedding has a NULL, NaN or infinite component")]
    NotFinite,
    #[error("query_embedding is all zeros, which has no cosine distance")]
    AllZero,
    #[error("query_embedding must be a one-dimensional array of numbers")]
    NotOneDimensional,
    #[error("query_embedding's component {0} is not a number")]
    NotANumber(usize),
}

/// The components of a query embedding given as text: pgvector's form `[1,2,3]` or an array's
/// `{1,2,3}` (whitespace around components allowed, `NULL` and `"1.5"` as an array's text has
/// them). Each is read as a real (correctly rounded, as pgvector and float4 read text; one beyond
/// real's range is infinite, refused later as not finite). The component named in `NotANumber` counts from 1; its text is not repeated (an embedding is
/// the caller's data).
pub fn parse_query_vector(text: &str) -> Result<Vec<Option<f32>>, QueryVectorError> {
    let t = text.trim();
    let inner = t
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .or_else(|| t.strip_prefix('{').and_then(|r| r.strip_suffix('}')))
        .ok_or(QueryVectorError::NotOneDimensional)?;
    if inner.contains(['[', ']', '{', '}']) || inner.trim().is_empty() {
        return Err(QueryVectorError::NotOneDimensional);
    }
    inner
        .split(',')
        .enumerate()
        .map(|(i, c)| {
            let c = c.trim();
            if c.eq_ignore_ascii_case("null") {
                return Ok(None);
            }
            let c = c.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(c).trim();
            c.parse::<f32>().map(Some).map_err(|_| QueryVectorError::NotANumber(i + 1))
        })
        .collect()
}

/// float8 components as real (the type of pgvector's vector): rounded to nearest, a value
/// beyond real's range becomes infinite (and is then refused as not finite, never an overflow).
pub fn to_f32(components: &[Option<f64>]) -> Vec<Option<f32>> {
    components.iter().map(|c| c.map(|x| x as f32)).collect()
}

/// pgvector's text form of checked components: `[c1,c2,...]`, each the shortest text that reads
/// back as the same real.
pub fn format_query_vector(components: &[f32]) -> String {
    let mut s = String::with_capacity(components.len() * 10 + 2);
    s.push('[');
    for (i, c) in components.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&c.to_string());
    }
    s.push(']');
    s
}

/// Checks components (from `to_f32`) and returns pgvector's text form of them.
pub fn query_vector_text(components: &[Option<f32>], dims: Option<usize>) -> Result<String, QueryVectorError> {
    if components.is_empty() {
        return Err(QueryVectorError::NotOneDimensional);
    }
    check_query_vector(components.iter().copied(), dims)?;
    let v: Vec<f32> = components.iter().map(|c| c.unwrap_or(0.0)).collect();
    Ok(format_query_vector(&v))
}

/// Checks the components of a one-dimensional, non-empty query embedding against the column's
/// dimensions (`None`: a column of no fixed size). The checks run in this order, and the first
/// that fails is the answer: dimensions, then a NULL, NaN or infinity, then all zeros.
pub fn check_query_vector<I>(components: I, dims: Option<usize>) -> Result<(), QueryVectorError>
where
    I: ExactSizeIterator<Item = Option<f32>>,
{
    let got = components.len();
    if let Some(want) = dims {
        if got != want {
            return Err(QueryVectorError::Dimensions { got, want });
        }
    }
    let mut nonzero = false;
    for c in components {
        match c {
            Some(x) if x.is_finite() => nonzero |= x != 0.0,
            _ => return Err(QueryVectorError::NotFinite),
        }
    }
    if nonzero {
        Ok(())
    } else {
        Err(QueryVectorError::AllZero)
    }
}

/// The fillfactor `memory.enable_embeddings` gives memory.observations for embeddings of `dims`
/// dimensions: each heap page keeps room for one more version of a typical row, so that an UPDATE
/// that changes no indexed column (memory.remember's merge: metadata, tier, last_seen_at,
/// seen_count) is a HOT update on the row's own page, not a new version elsewhere with an entry in
/// every index (the HNSW one a full insertion). A typical row is `ROW_WITHOUT_EMBEDDING` bytes
/// besides its embedding (pgvector: an 8-byte header and 4 bytes a dimension), stored in the row
/// while the row fits under PostgreSQL's TOAST threshold, else out of line (an 18-byte pointer).
/// PostgreSQL fills a page with new rows until its free space would fall below (100 - fillfactor)%
/// of it, so that share is set to one row (with its line pointer): 76 for 384 dimensions (three
/// rows of ~1.7 kB a page instead of four), 94 where the vector is stored out of line. (400 bytes:
/// the columns memory.remember writes, its SHA-256 hex and times, a classification stamp in the
/// metadata and a few sentences of text.)
pub fn observations_fillfactor(dims: usize) -> u8 {
    const BLCKSZ: usize = 8192;
    const TOAST_TUPLE_THRESHOLD: usize = 2032;
    const ROW_WITHOUT_EMBEDDING: usize = 400;
    let inline = ROW_WITHOUT_EMBEDDING + 8 + 4 * dims;
    let row = if inline <= TOAST_TUPLE_THRESHOLD { inline } else { ROW_WITHOUT_EMBEDDING + 18 };
    let room = row.div_ceil(8) * 8 + 4; // MAXALIGN, and the line pointer
    let keep = (100 * room).div_ceil(BLCKSZ);
    u8::try_from(100usize.saturating_sub(keep).clamp(10, 100)).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL's rule for new rows (RelationGetBufferForTuple): a row of `len` bytes goes on a
    /// page while its free space is at least `len` + (100 - fillfactor)% of the page. Returns the
    /// rows a page takes and the space left after them.
    fn fill(fillfactor: u8, len: usize) -> (usize, usize) {
        let target = 8192 * (100 - usize::from(fillfactor)) / 100;
        let (mut rows, mut free) = (0, 8192 - 24);
        while free >= len + 4 + target {
            free -= len + 4;
            rows += 1;
        }
        (rows, free)
    }

    #[test]
    fn observations_fillfactor_leaves_one_rows_room_on_each_page() {
        for dims in 1..=2000 {
            let f = observations_fillfactor(dims);
            assert!((10..=100).contains(&f), "{dims}: {f}");
            let inline = 400 + 8 + 4 * dims;
            let row = if inline <= 2032 { inline } else { 418 };
            let len = row.div_ceil(8) * 8;
            let (rows, free) = fill(f, len);
            assert!(rows >= 1, "{dims}: no row fits");
            // Room for the row's next version (a HOT update) ...
            assert!(free >= len + 4, "{dims}: {free} bytes left for a {len}-byte row");
            // ... and no more withheld than that room and the fillfactor's step (1% of the page).
            assert!(free < 2 * (len + 4) + 82, "{dims}: {free} bytes left for a {len}-byte row");
        }
    }

    #[test]
    fn observations_fillfactor_for_common_models() {
        // 384 dimensions (~1.7 kB rows): three a page instead of four, a page's room for a fourth.
        assert_eq!(observations_fillfactor(384), 76);
        assert_eq!((fill(76, 1744).0, fill(100, 1744).0), (3, 4));
        // 768 and 1536: the vector is stored out of line (TOAST), the row is small.
        assert_eq!(observations_fillfactor(768), 94);
        assert_eq!(observations_fillfactor(1536), 94);
    }
    use proptest::prelude::*;

    fn check(v: &[Option<f32>], dims: Option<usize>) -> Result<(), QueryVectorError> {
        check_query_vector(v.iter().copied(), dims)
    }

    #[test]
    fn accepts_finite_nonzero_of_the_dimensions() {
        assert_eq!(check(&[Some(0.0), Some(-1.5), Some(3.0)], Some(3)), Ok(()));
        assert_eq!(check(&[Some(1e-30)], None), Ok(()));
    }

    #[test]
    fn dimensions_first() {
        // A NaN in a vector of the wrong size is reported as the size.
        assert_eq!(check(&[Some(f32::NAN), Some(1.0)], Some(3)), Err(QueryVectorError::Dimensions { got: 2, want: 3 }));
    }

    #[test]
    fn null_nan_and_infinities_refused() {
        for bad in [None, Some(f32::NAN), Some(f32::INFINITY), Some(f32::NEG_INFINITY)] {
            assert_eq!(check(&[Some(1.0), bad], Some(2)), Err(QueryVectorError::NotFinite));
        }
    }

    #[test]
    fn all_zero_refused_after_finiteness() {
        assert_eq!(check(&[Some(0.0), Some(-0.0)], None), Err(QueryVectorError::AllZero));
        assert_eq!(check(&[Some(0.0), None], None), Err(QueryVectorError::NotFinite));
    }

    #[test]
    fn parses_both_text_forms() {
        assert_eq!(parse_query_vector("[1,2.5,-3e2]"), Ok(vec![Some(1.0), Some(2.5), Some(-300.0)]));
        assert_eq!(parse_query_vector(" { 1 , \"2\" ,NULL} "), Ok(vec![Some(1.0), Some(2.0), None]));
        assert_eq!(parse_query_vector("[.5, 5.]"), Ok(vec![Some(0.5), Some(5.0)]));
        let nan = parse_query_vector("{NaN,Infinity,-inf,1e300}").unwrap();
        assert!(nan[0].unwrap().is_nan() && nan[1] == Some(f32::INFINITY) && nan[2] == Some(f32::NEG_INFINITY) && nan[3] == Some(f32::INFINITY));
    }

    #[test]
    fn text_that_is_no_vector_refused() {
        for bad in ["", "[]", "{}", "1,2", "[1,2", "{{1,2},{3,4}}", "[[1],[2]]", "(1,2)"] {
            assert_eq!(parse_query_vector(bad), Err(QueryVectorError::NotOneDimensional), "{bad}");
        }
        assert_eq!(parse_query_vector("[1,x,3]"), Err(QueryVectorError::NotANumber(2)));
        assert_eq!(parse_query_vector("[1,,3]"), Err(QueryVectorError::NotANumber(2)));
        // The message names the position, never the text.
        assert!(!QueryVectorError::NotANumber(2).to_string().contains('x'));
    }

    #[test]
    fn float8_beyond_real_is_not_finite() {
        let v = to_f32(&[Some(1e300), Some(1.0)]);
        assert_eq!(query_vector_text(&v, Some(2)), Err(QueryVectorError::NotFinite));
        assert_eq!(query_vector_text(&to_f32(&[Some(0.1), Some(-2.0)]), Some(2)), Ok("[0.1,-2]".to_owned()));
        assert_eq!(query_vector_text(&[], None), Err(QueryVectorError::NotOneDimensional));
    }

    proptest! {
        /// The text form reads back as the same reals, whichever form it came in.
        #[test]
        fn text_round_trips(v in prop::collection::vec(prop::num::f32::NORMAL | prop::num::f32::ZERO | prop::num::f32::SUBNORMAL, 1..64)) {
            let text = format_query_vector(&v);
            let back = parse_query_vector(&text).unwrap();
            prop_assert_eq!(back.iter().map(|c| c.unwrap().to_bits()).collect::<Vec<_>>(), v.iter().map(|c| c.to_bits()).collect::<Vec<_>>());
            let braces = format!("{{{}}}", &text[1..text.len() - 1]);
            prop_assert_eq!(parse_query_vector(&braces).unwrap(), parse_query_vector(&text).unwrap());
        }

        /// Finite vectors with a non-zero component of the column's size always pass; scaling
        /// by a non-zero finite factor never changes the answer.
        #[test]
        fn finite_nonzero_passes(v in prop::collection::vec(-1e6f32..1e6f32, 1..64), i in any::<prop::sample::Index>()) {
            let mut v = v;
            let k = i.index(v.len());
            if v[k] == 0.0 { v[k] = 1.0; }
            let opts: Vec<Option<f32>> = v.iter().copied().map(Some).collect();
            prop_assert_eq!(check(&opts, Some(v.len())), Ok(()));
            let scaled: Vec<Option<f32>> = v.iter().map(|x| Some(x * 0.5)).collect();
            prop_assert_eq!(check(&scaled, None), Ok(()));
        }

        /// A single non-finite component anywhere is refused, whatever the others are.
        #[test]
        fn one_bad_component_refused(v in prop::collection::vec(-1e6f32..1e6f32, 1..64), i in any::<prop::sample::Index>(), bad in 0u8..4) {
            let mut opts: Vec<Option<f32>> = v.iter().copied().map(Some).collect();
            let k = i.index(opts.len());
            opts[k] = match bad { 0 => None, 1 => Some(f32::NAN), 2 => Some(f32::INFINITY), _ => Some(f32::NEG_INFINITY) };
            prop_assert_eq!(check(&opts, Some(opts.len())), Err(QueryVectorError::NotFinite));
        }
    }
}
