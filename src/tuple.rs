//! Raw row access for the attachable triggers: resolve the column mapping from TG_ARGV, read the
//! inputs straight from the heap tuple, and write the tier back with one `heap_modify_tuple`.
//! This is the per-row hot path of a governed `INSERT ... SELECT`, so it avoids text round trips.

use crate::errors::MxError;
use memory_core::classify::{SourceType, Tier};
use pgrx::prelude::*;
use pgrx::{direct_function_call_as_datum, varlena, IntoDatum, PgTupleDesc};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::num::NonZeroUsize;

const TRIGGER_PROTOCOL: &str = "39P01";

/// The firing context of a BEFORE ROW INSERT/UPDATE trigger.
pub struct RowTrigger {
    td: *const pg_sys::TriggerData,
    tupdesc: pg_sys::TupleDesc,
    new: pg_sys::HeapTuple,
    old: Option<pg_sys::HeapTuple>,
}

impl RowTrigger {
    pub fn new(td: &pg_sys::TriggerData, fname: &str) -> Result<Self, MxError> {
        let ev = td.tg_event;
        let before = ev & pg_sys::TRIGGER_EVENT_TIMINGMASK == pg_sys::TRIGGER_EVENT_BEFORE;
        let row = ev & pg_sys::TRIGGER_EVENT_ROW != 0;
        let op = ev & pg_sys::TRIGGER_EVENT_OPMASK;
        if !before || !row || !(op == pg_sys::TRIGGER_EVENT_INSERT || op == pg_sys::TRIGGER_EVENT_UPDATE) {
            return Err(MxError::new(TRIGGER_PROTOCOL, format!("{fname} must be fired BEFORE INSERT OR UPDATE FOR EACH ROW"))
                .hint("Attach it with memory.govern(table, options)."));
        }
        let tupdesc = unsafe { (*td.tg_relation).rd_att };
        let (new, old) = if op == pg_sys::TRIGGER_EVENT_INSERT {
            (td.tg_trigtuple, None)
        } else {
            (td.tg_newtuple, Some(td.tg_trigtuple))
        };
        Ok(RowTrigger { td, tupdesc, new, old })
    }

    pub fn new_tuple(&self) -> pg_sys::HeapTuple {
        self.new
    }

    pub fn old_tuple(&self) -> Option<pg_sys::HeapTuple> {
        self.old
    }

    pub fn relid(&self) -> pg_sys::Oid {
        unsafe { (*(*self.td).tg_relation).rd_id }
    }

    pub fn relname(&self) -> String {
        unsafe {
            let rel = (*self.td).tg_relation;
            let name = CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()).to_string_lossy();
            let ns = pg_sys::get_namespace_name((*(*rel).rd_rel).relnamespace);
            if ns.is_null() {
                name.into_owned()
            } else {
                format!("{}.{}", CStr::from_ptr(ns).to_string_lossy(), name)
            }
        }
    }

    fn attr(&self, attnum: i32) -> &pg_sys::FormData_pg_attribute {
        unsafe { &*(*self.tupdesc).attrs.as_ptr().add((attnum - 1) as usize) }
    }

    fn datum(&self, tuple: pg_sys::HeapTuple, attnum: i32) -> Option<pg_sys::Datum> {
        let attno = NonZeroUsize::new(attnum as usize).expect("attnums are 1-based");
        unsafe { pgrx::heap_getattr_raw(tuple, attno, self.tupdesc) }
    }

    fn attnum(&self, column: &str, role: &str) -> Result<i32, MxError> {
        let c = std::ffi::CString::new(column).map_err(|_| MxError::bad_argument("column names cannot contain NUL"))?;
        let n = unsafe { pg_sys::SPI_fnumber(self.tupdesc, c.as_ptr()) };
        if n <= 0 {
            return Err(MxError::bad_argument(format!("table {} has no column \"{column}\" (the {role} column)", self.relname()))
                .hint("Fix the mapping with memory.govern(table, options)."));
        }
        Ok(n)
    }

    /// Build the returned tuple with `cols` replaced, or the new tuple as it is when nothing is.
    pub fn modified(&self, repl: &mut [(i32, pg_sys::Datum)]) -> PgHeapTuple<'static, AllocatedByPostgres> {
        let tuple = if repl.is_empty() {
            self.new
        } else {
            let mut cols: Vec<i32> = repl.iter().map(|r| r.0).collect();
            let mut vals: Vec<pg_sys::Datum> = repl.iter().map(|r| r.1).collect();
            let mut nulls = vec![false; repl.len()];
            unsafe {
                pg_sys::heap_modify_tuple_by_cols(
                    self.new,
                    self.tupdesc,
                    repl.len() as i32,
                    cols.as_mut_ptr(),
                    vals.as_mut_ptr(),
                    nulls.as_mut_ptr(),
                )
            }
        };
        unsafe { PgHeapTuple::from_heap_tuple(PgTupleDesc::from_pg_unchecked(self.tupdesc), tuple) }
    }
}

#[derive(Clone, Copy)]
enum TargetKind {
    /// A column of an enum type with the four classification labels: label OIDs by tier.
    Enum([pg_sys::Oid; 4]),
    Text,
    Jsonb,
}

enum SourceTypeKind {
    Enum,
    Text,
}

/// The column mapping of one firing, resolved against the relation's tuple descriptor.
pub struct ClassifyColumns {
    content: i32,
    files: Option<i32>,
    source_type: Option<(i32, SourceTypeKind)>,
    org: Option<i32>,
    targets: Vec<(i32, TargetKind)>,
}

thread_local! {
    // Enum type OID -> label OIDs in tier order. Label OIDs of a type never change; a dropped
    // and re-created type has a new type OID, so entries never go stale.
    static TIER_ENUMS: RefCell<HashMap<pg_sys::Oid, [pg_sys::Oid; 4]>> = RefCell::new(HashMap::new());
    // Enum label OID -> source type (None: a label that is not a source type).
    static SOURCE_TYPE_LABELS: RefCell<HashMap<pg_sys::Oid, Option<SourceType>>> = RefCell::new(HashMap::new());
}

fn tier_enum_oids(typoid: pg_sys::Oid) -> Option<[pg_sys::Oid; 4]> {
    if let Some(o) = TIER_ENUMS.with(|m| m.borrow().get(&typoid).copied()) {
        return Some(o);
    }
    let mut out = [pg_sys::InvalidOid; 4];
    for (i, t) in Tier::ALL.iter().enumerate() {
        let oid = Spi::get_one_with_args::<pg_sys::Oid>(
            "SELECT oid FROM pg_catalog.pg_enum WHERE enumtypid = $1 AND enumlabel = $2",
            &[typoid.into(), t.as_str().into()],
        )
        .ok()
        .flatten()?;
        out[i] = oid;
    }
    TIER_ENUMS.with(|m| m.borrow_mut().insert(typoid, out));
    Some(out)
}

fn source_type_of_label(label_oid: pg_sys::Oid) -> Option<SourceType> {
    if let Some(s) = SOURCE_TYPE_LABELS.with(|m| m.borrow().get(&label_oid).copied()) {
        return s;
    }
    let (label, _, _) = pgrx::enum_helper::lookup_enum_by_oid(label_oid);
    let st = SourceType::parse(&label);
    SOURCE_TYPE_LABELS.with(|m| m.borrow_mut().insert(label_oid, st));
    st
}

fn is_text(typoid: pg_sys::Oid) -> bool {
    typoid == pg_sys::TEXTOID || typoid == pg_sys::VARCHAROID
}

fn parse_tier(label: &str, column: &str) -> Result<Tier, MxError> {
    Tier::parse(label).ok_or_else(|| {
        MxError::bad_argument(format!("invalid classification \"{label}\" in column \"{column}\""))
            .hint("Use one of: public, internal, confidential, restricted.")
    })
}

// JB_FOBJECT from utils/jsonb.h: the root container of a jsonb value is an object.
const JB_FOBJECT: u32 = 0x2000_0000;

fn jsonb_is_object(datum: pg_sys::Datum) -> bool {
    unsafe {
        let v = pg_sys::pg_detoast_datum(datum.cast_mut_ptr());
        let header = *(varlena::vardata_any(v) as *const u32);
        header & JB_FOBJECT != 0
    }
}

impl ClassifyColumns {
    pub fn resolve(row: &RowTrigger, trigger: &PgTrigger) -> Result<Self, MxError> {
        let args = trigger.extra_args().unwrap_or_default();
        if args.len() < 4 {
            return Err(MxError::new(TRIGGER_PROTOCOL, format!("memory.classify_trigger on {} needs 4 arguments (content, source_files, source_type, target), got {}", row.relname(), args.len()))
                .hint("Attach it with memory.govern(table, options)."));
        }
        let content = row.attnum(&args[0], "content")?;
        if !is_text(row.attr(content).atttypid) {
            return Err(MxError::bad_argument(format!("column \"{}\" of {} must be text to be classified", args[0], row.relname())));
        }
        let files = if args[1].is_empty() { None } else { Some(row.attnum(&args[1], "source_files")?) };
        if let Some(f) = files {
            let t = row.attr(f).atttypid;
            if t != pg_sys::TEXTARRAYOID && t != pg_sys::VARCHARARRAYOID {
                return Err(MxError::bad_argument(format!("column \"{}\" of {} must be text[]", args[1], row.relname())));
            }
        }
        let source_type = if args[2].is_empty() {
            None
        } else {
            let n = row.attnum(&args[2], "source_type")?;
            let t = row.attr(n).atttypid;
            let kind = if unsafe { pg_sys::type_is_enum(t) } {
                SourceTypeKind::Enum
            } else if is_text(t) {
                SourceTypeKind::Text
            } else {
                return Err(MxError::bad_argument(format!("column \"{}\" of {} must be memory.source_type or text", args[2], row.relname())));
            };
            Some((n, kind))
        };
        let mut targets = vec![Self::target(row, &args[3])?];
        let mut org = None;
        for extra in &args[4..] {
            if let Some(c) = extra.strip_prefix("org=") {
                org = Some(row.attnum(c, "org")?);
            } else if let Some(c) = extra.strip_prefix("target=") {
                targets.push(Self::target(row, c)?);
            } else {
                return Err(MxError::new(TRIGGER_PROTOCOL, format!("unknown memory.classify_trigger argument \"{extra}\"")));
            }
        }
        Ok(ClassifyColumns { content, files, source_type, org, targets })
    }

    fn target(row: &RowTrigger, column: &str) -> Result<(i32, TargetKind), MxError> {
        let n = row.attnum(column, "target")?;
        let t = row.attr(n).atttypid;
        let kind = if t == pg_sys::JSONBOID {
            TargetKind::Jsonb
        } else if is_text(t) {
            TargetKind::Text
        } else if unsafe { pg_sys::type_is_enum(t) } {
            TargetKind::Enum(tier_enum_oids(t).ok_or_else(|| {
                MxError::bad_argument(format!("enum type of column \"{column}\" lacks the classification labels"))
            })?)
        } else {
            return Err(MxError::bad_argument(format!(
                "column \"{column}\" of {} must be memory.classification, text or jsonb",
                row.relname()
            )));
        };
        Ok((n, kind))
    }

    pub fn content<'t>(&self, row: &RowTrigger, t: pg_sys::HeapTuple) -> Option<&'t [u8]> {
        row.datum(t, self.content).map(|d| unsafe {
            let v = pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr());
            varlena::varlena_to_byte_slice(v)
        })
    }

    pub fn source_files<'t>(&self, row: &RowTrigger, t: pg_sys::HeapTuple) -> Option<Array<'t, &'t str>> {
        let f = self.files?;
        row.datum(t, f).and_then(|d| unsafe { Array::<&str>::from_datum(d, false) })
    }

    pub fn source_type(&self, row: &RowTrigger, t: pg_sys::HeapTuple) -> Result<Option<SourceType>, MxError> {
        let Some((n, kind)) = &self.source_type else { return Ok(None) };
        let Some(d) = row.datum(t, *n) else { return Ok(None) };
        match kind {
            SourceTypeKind::Enum => {
                let oid = pg_sys::Oid::from(d.value() as u32);
                source_type_of_label(oid)
                    .map(Some)
                    .ok_or_else(|| MxError::bad_argument("source_type column holds a label that is not a memory.source_type"))
            }
            SourceTypeKind::Text => {
                let s = unsafe { varlena::text_to_rust_str(pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr())) }.unwrap_or("");
                SourceType::parse(s).map(Some).ok_or_else(|| {
                    MxError::bad_argument(format!("unknown source_type \"{s}\""))
                        .hint("Use one of: decision, fact, preference, tool_result.")
                })
            }
        }
    }

    pub fn org<'t>(&self, row: &RowTrigger, t: pg_sys::HeapTuple) -> Option<&'t str> {
        let d = row.datum(t, self.org?)?;
        unsafe { varlena::text_to_rust_str(pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr())).ok() }
    }

    /// The least and the most restrictive valid tiers held by the target columns (None when no
    /// target holds one). The least catches a direct downgrade of one target while another
    /// still holds the old tier.
    pub fn read_tiers(&self, row: &RowTrigger, t: pg_sys::HeapTuple) -> Result<Option<(Tier, Tier)>, MxError> {
        let mut range: Option<(Tier, Tier)> = None;
        for (n, kind) in &self.targets {
            let Some(d) = row.datum(t, *n) else { continue };
            let tier = match kind {
                TargetKind::Enum(oids) => {
                    let oid = pg_sys::Oid::from(d.value() as u32);
                    oids.iter().position(|o| *o == oid).map(|i| Tier::ALL[i])
                }
                TargetKind::Text => {
                    let s = unsafe { varlena::text_to_rust_str(pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr())) }.unwrap_or("");
                    Some(parse_tier(s, column_name(row, *n))?)
                }
                TargetKind::Jsonb => {
                    if !jsonb_is_object(d) {
                        return Err(MxError::bad_argument(format!("column \"{}\" must hold a JSON object to receive \"classification\"", column_name(row, *n))));
                    }
                    let key = "classification".into_datum();
                    let v = unsafe { direct_function_call_as_datum(pg_sys::jsonb_object_field_text, &[Some(d), key]) };
                    match v {
                        None => None,
                        Some(v) => {
                            let s = unsafe { varlena::text_to_rust_str(pg_sys::pg_detoast_datum_packed(v.cast_mut_ptr())) }.unwrap_or("");
                            Some(parse_tier(s, column_name(row, *n))?)
                        }
                    }
                }
            };
            if let Some(t) = tier {
                range = Some(match range {
                    None => (t, t),
                    Some((lo, hi)) => (lo.min(t), hi.max(t)),
                });
            }
        }
        Ok(range)
    }

    /// Whether any classification input differs between two versions of the row.
    pub fn inputs_differ(&self, row: &RowTrigger, a: pg_sys::HeapTuple, b: pg_sys::HeapTuple) -> bool {
        let cols = [Some(self.content), self.files, self.source_type.as_ref().map(|s| s.0), self.org];
        cols.into_iter().flatten().any(|n| {
            let att = row.attr(n);
            match (row.datum(a, n), row.datum(b, n)) {
                (None, None) => false,
                (Some(x), Some(y)) => !unsafe { same_image(x, y, att) },
                _ => true,
            }
        })
    }

    /// The row to store, with every target column holding `tier`.
    pub fn write_tier(&self, row: &RowTrigger, tier: Tier) -> PgHeapTuple<'static, AllocatedByPostgres> {
        let t = row.new_tuple();
        let mut repl = Vec::with_capacity(self.targets.len());
        for (n, kind) in &self.targets {
            let cur = row.datum(t, *n);
            let value = match kind {
                TargetKind::Enum(oids) => {
                    let want = oids[tier as usize];
                    if cur.map(|d| pg_sys::Oid::from(d.value() as u32)) == Some(want) {
                        continue;
                    }
                    pg_sys::Datum::from(want)
                }
                TargetKind::Text => {
                    let same = cur.map(|d| unsafe { varlena::text_to_rust_str(pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr())) } == Ok(tier.as_str()));
                    if same == Some(true) {
                        continue;
                    }
                    tier.as_str().into_datum().expect("text datum")
                }
                TargetKind::Jsonb => {
                    let patch = pgrx::JsonB(serde_json::json!({ "classification": tier.as_str() })).into_datum();
                    match cur {
                        None => patch.expect("jsonb datum"),
                        Some(d) => {
                            let key = "classification".into_datum();
                            let v = unsafe { direct_function_call_as_datum(pg_sys::jsonb_object_field_text, &[Some(d), key]) };
                            let same = v.map(|v| unsafe { varlena::text_to_rust_str(pg_sys::pg_detoast_datum_packed(v.cast_mut_ptr())) } == Ok(tier.as_str()));
                            if same == Some(true) {
                                continue;
                            }
                            unsafe { direct_function_call_as_datum(pg_sys::jsonb_concat, &[Some(d), patch]) }.expect("jsonb datum")
                        }
                    }
                }
            };
            repl.push((*n, value));
        }
        row.modified(&mut repl)
    }
}

/// Whether two datums of one attribute have the same stored image (as datum_image_eq in C, which
/// pgrx does not bind). Differently compressed copies of one value count as different; the
/// caller then re-classifies, which is merely redundant.
unsafe fn same_image(x: pg_sys::Datum, y: pg_sys::Datum, att: &pg_sys::FormData_pg_attribute) -> bool {
    if att.attbyval {
        return x.value() == y.value();
    }
    let (a, b): (&[u8], &[u8]) = if att.attlen == -1 {
        let (pa, pb) = (x.cast_mut_ptr::<pg_sys::varlena>(), y.cast_mut_ptr::<pg_sys::varlena>());
        unsafe {
            (
                std::slice::from_raw_parts(pa as *const u8, varlena::varsize_any(pa)),
                std::slice::from_raw_parts(pb as *const u8, varlena::varsize_any(pb)),
            )
        }
    } else if att.attlen > 0 {
        let n = att.attlen as usize;
        unsafe { (std::slice::from_raw_parts(x.cast_mut_ptr::<u8>(), n), std::slice::from_raw_parts(y.cast_mut_ptr::<u8>(), n)) }
    } else {
        return false;
    };
    a == b
}

fn column_name(row: &RowTrigger, attnum: i32) -> &str {
    unsafe { CStr::from_ptr(row.attr(attnum).attname.data.as_ptr()) }.to_str().unwrap_or("?")
}

