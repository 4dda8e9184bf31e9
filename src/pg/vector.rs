//! pgvector's values without linking to it: a `vector` datum made from components (its layout:
//! a 4-byte varlena header, the dimensions as an int16, an unused int16, the components as
//! float4) and a distance function of it called through fmgr (memory.remember's near pass).

use pgrx::pg_sys;

/// pgvector's `vector` of `components`, palloc'd in the current memory context.
pub fn vector_datum(components: &[f32]) -> pg_sys::Datum {
    let size = 8 + 4 * components.len();
    // SAFETY: a zeroed allocation of `size` bytes, written within it: the header (a 4-byte
    // varlena of `size`), the dimensions, then the components, by unaligned writes.
    unsafe {
        let p = pg_sys::palloc0(size).cast::<u8>();
        pgrx::set_varsize_4b(p.cast(), size as i32);
        std::ptr::write_unaligned(p.add(4).cast::<i16>(), components.len() as i16);
        for (k, c) in components.iter().enumerate() {
            std::ptr::write_unaligned(p.add(8 + 4 * k).cast::<f32>(), *c);
        }
        pg_sys::Datum::from(p)
    }
}

/// `vector_datum(components)` as a bind parameter of `oid`, pgvector's `vector` type (the
/// caller's lookup), alive in the current memory context.
pub fn vector_arg(components: &[f32], oid: pg_sys::Oid) -> pgrx::datum::DatumWithOid<'static> {
    // SAFETY: a non-NULL datum in pgvector's vector layout, palloc'd in the current memory
    // context, which outlives the statements it is bound to (run within the caller's call).
    unsafe { pgrx::datum::DatumWithOid::new(vector_datum(components), oid) }
}

/// A distance function of two vectors returning float8 (pgvector's cosine_distance(vector,
/// vector), by oid), looked up once and called per pair.
pub struct Distance {
    finfo: pg_sys::FmgrInfo,
}

impl Distance {
    pub fn new(function: pg_sys::Oid) -> Distance {
        // SAFETY: fmgr_info fills a zeroed FmgrInfo for an existing function's oid (it raises
        // for an unknown one), allocating in the current memory context.
        unsafe {
            let mut finfo: pg_sys::FmgrInfo = std::mem::zeroed();
            pg_sys::fmgr_info(function, &mut finfo);
            Distance { finfo }
        }
    }

    /// The function of `a` and `b`, two non-NULL vector datums.
    pub fn between(&mut self, a: pg_sys::Datum, b: pg_sys::Datum) -> f64 {
        // SAFETY: the function takes two vectors and returns a float8 (by value on 64-bit
        // platforms, as pgrx builds only for them); FunctionCall2Coll raises on its errors.
        unsafe { f64::from_bits(pg_sys::FunctionCall2Coll(&mut self.finfo, pg_sys::InvalidOid, a, b).value() as u64) }
    }
}
