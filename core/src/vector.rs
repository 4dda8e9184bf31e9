//! The query embedding of a hybrid recall or retrieval (docs/vector.md), checked before it is
//! compared with anything: of the column's dimensions, every component a finite number, not all
//! zero (cosine distance has no direction for the zero vector).

/// Why a query embedding is refused; each is a bad argument (22023) with this message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryVectorError {
    #[error("query_embedding has {got} dimensions, the embeddings have {want}")]
    Dimensions { got: usize, want: usize },
    #[error("query_embedding has a NULL, NaN or infinite component")]
    NotFinite,
    #[error("query_embedding is all zeros, which has no cosine distance")]
    AllZero,
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

#[cfg(test)]
mod tests {
    use super::*;
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

    proptest! {
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
