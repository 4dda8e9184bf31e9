//! Raw row access for the attachable triggers. This is the per-row hot path of a governed
//! `INSERT ... SELECT`, so: the column mapping is resolved once per trigger and cached, a row is
//! deformed once and formed once, and no text round trips happen.

use super::error::MxError;
use memory_core::classify::{SourceType, Tier};
use memory_core::protocol::{column_type_message, ClassifyArgs, StampArgs};
use super::maxalign;
use pgrx::prelude::*;
use pgrx::{direct_function_call_as_datum, varlena, IntoDatum, PgTupleDesc};
use std::cell::{Cell, RefCell};
use std::ffi::CStr;

use super::error::code::TRIGGER_PROTOCOL;

/// `schema.table` of an open relation, for messages.
///
/// # Safety
/// `rel` is an open relation (its relcache entry valid for the call).
pub unsafe fn relation_name(rel: pg_sys::Relation) -> String {
    unsafe {
        let name = CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()).to_string_lossy();
        let ns = pg_sys::get_namespace_name((*(*rel).rd_rel).relnamespace);
        if ns.is_null() {
            name.into_owned()
        } else {
            format!("{}.{}", CStr::from_ptr(ns).to_string_lossy(), name)
        }
    }
}

/// The index (0-based) of the live column `name` in a tuple descriptor: the one column lookup by
/// name of the pg layer (triggers, bulk inserts).
///
/// # Safety
/// `desc` is a valid tuple descriptor for the duration of the call.
pub(crate) unsafe fn find_attr(desc: pg_sys::TupleDesc, name: &str) -> Option<usize> {
    // SAFETY: attrs holds natts entries; attname is a NUL-terminated NameData.
    unsafe {
        (0..(*desc).natts as usize).find(|&i| {
            let a = &*crate::pg::tupdesc_attr(desc, i);
            !a.attisdropped && CStr::from_ptr(a.attname.data.as_ptr()).to_bytes() == name.as_bytes()
        })
    }
}

/// The type of the live column `name` of the trigger's relation, if it has one.
pub fn column_type(td: &pg_sys::TriggerData, name: &str) -> Option<pg_sys::Oid> {
    // SAFETY: the trigger's relation and its descriptor are valid while the trigger runs.
    unsafe {
        let desc = (*td.tg_relation).rd_att;
        find_attr(desc, name).map(|i| (*crate::pg::tupdesc_attr(desc, i)).atttypid)
    }
}

/// The schema-qualified name of the relation a trigger fired on.
pub fn trigger_relid(td: &pg_sys::TriggerData) -> pg_sys::Oid {
    // SAFETY: the trigger's relation is open while the trigger runs.
    unsafe { (*td.tg_relation).rd_id }
}

/// The oid of the trigger that fired.
pub fn trigger_oid(td: &pg_sys::TriggerData) -> pg_sys::Oid {
    // SAFETY: the trigger's description is valid while it runs.
    unsafe { (*td.tg_trigger).tgoid }
}

/// `schema.table` of the table a trigger fired on, for events and messages: on Citus, the
/// distributed table a shard belongs to, not the shard (`memory.observations`, not
/// `memory.observations_102060`), so a tenant's events name the same table on every node and
/// after its shard is moved or split. Looked up when the statement's work is first worked out
/// (cached with it) and on error paths, never per row.
pub fn trigger_relation_name(td: &pg_sys::TriggerData) -> String {
    // SAFETY: the trigger's relation is open while the trigger runs.
    let relid = unsafe { (*td.tg_relation).rd_id };
    if let Some(name) = super::citus::logical_table(relid).and_then(super::citus::qualified_name) {
        return name;
    }
    // SAFETY: as above.
    unsafe { relation_name(td.tg_relation) }
}

/// The firing context of a BEFORE ROW INSERT/UPDATE trigger.
pub struct RowTrigger<'a> {
    td: &'a pg_sys::TriggerData,
    tupdesc: pg_sys::TupleDesc,
    new: pg_sys::HeapTuple,
    old: Option<pg_sys::HeapTuple>,
}

impl<'a> RowTrigger<'a> {
    pub fn new(td: &'a pg_sys::TriggerData, fname: &str) -> Result<Self, MxError> {
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

    pub fn is_update(&self) -> bool {
        self.old.is_some()
    }

    /// Identity of the relation's tuple descriptor (it changes when the table's shape does), to
    /// key caches with.
    pub fn tupdesc_key(&self) -> usize {
        self.tupdesc as usize
    }

    /// TG_ARGV[0], if any.
    pub fn first_arg(&self) -> Option<String> {
        self.args().into_iter().next()
    }

    /// Attribute number (1-based) and type of a live column.
    pub fn find_column(&self, name: &str) -> Option<(i32, pg_sys::Oid)> {
        // SAFETY: the trigger's descriptor is valid while it runs.
        let i = unsafe { find_attr(self.tupdesc, name) }?;
        Some((i as i32 + 1, self.attr(i).atttypid))
    }

    /// Whether column `attnum` still is the live column `name` of type `typoid`.
    pub fn column_is(&self, attnum: i32, typoid: pg_sys::Oid, name: &str) -> bool {
        self.find_column(name) == Some((attnum, typoid))
    }

    /// Column `attnum` of the new row (or the old one), None for NULL.
    pub fn value(&self, old: bool, attnum: i32) -> Option<pg_sys::Datum> {
        let tuple = if old { self.old? } else { self.new };
        if attnum < 1 || attnum as usize > self.natts() {
            return None;
        }
        let mut isnull = false;
        // SAFETY: a tuple of this trigger and a valid attribute number of its descriptor.
        let d = unsafe { pg_sys::heap_getattr(tuple, attnum, self.tupdesc, &mut isnull) };
        (!isnull).then_some(d)
    }

    /// Column `attnum` of the new row (or the old one) as text, when the column is text or
    /// varchar; None for NULL or another type.
    pub fn text_value(&self, old: bool, attnum: i32) -> Option<&str> {
        let a = self.attr(attnum as usize - 1);
        if !is_text(a.atttypid) {
            return None;
        }
        let d = self.value(old, attnum)?;
        // SAFETY: a non-NULL datum of a text/varchar column of this trigger's row, alive for
        // the trigger call (which outlives &self).
        let bytes = unsafe { text_bytes(d) };
        Some(as_str(bytes, database_is_utf8()))
    }

    /// The new row, unchanged, as the trigger's result.
    pub fn unchanged(&self) -> PgHeapTuple<'static, AllocatedByPostgres> {
        // SAFETY: the new tuple of this trigger with its relation's descriptor.
        unsafe { PgHeapTuple::from_heap_tuple(pgrx::PgTupleDesc::from_pg_unchecked(self.tupdesc), self.new) }
    }

    pub fn relid(&self) -> pg_sys::Oid {
        unsafe { (*self.td.tg_relation).rd_id }
    }

    pub fn tgoid(&self) -> pg_sys::Oid {
        unsafe { (*self.td.tg_trigger).tgoid }
    }

    fn natts(&self) -> usize {
        unsafe { (*self.tupdesc).natts as usize }
    }

    pub fn relname(&self) -> String {
        trigger_relation_name(self.td)
    }

    fn attr(&self, idx: usize) -> &pg_sys::FormData_pg_attribute {
        unsafe { &*crate::pg::tupdesc_attr(self.tupdesc, idx) }
    }

    /// The trigger's TG_ARGV, without copying them out of the relcache more than needed.
    fn args(&self) -> Vec<String> {
        unsafe {
            let tg = &*self.td.tg_trigger;
            (0..tg.tgnargs as usize)
                .map(|i| CStr::from_ptr(*tg.tgargs.add(i)).to_string_lossy().into_owned())
                .collect()
        }
    }

    fn column(&self, name: &str, role: &str) -> Result<Col, MxError> {
        // SAFETY: the trigger's descriptor is valid while it runs.
        let Some(idx) = (unsafe { find_attr(self.tupdesc, name) }) else {
            return Err(MxError::bad_argument(format!("table {} has no column \"{name}\" (the {role} column)", self.relname()))
                .hint("Fix the mapping with memory.govern(table, options)."));
        };
        let a = self.attr(idx);
        Ok(Col { idx, name: name.to_string(), typoid: a.atttypid, byval: a.attbyval, len: a.attlen })
    }

    fn deform(&self, tuple: pg_sys::HeapTuple, buf: &mut Deformed) {
        let n = self.natts();
        buf.values.resize(n, pg_sys::Datum::from(0));
        buf.nulls.resize(n, true);
        unsafe { pg_sys::heap_deform_tuple(tuple, self.tupdesc, buf.values.as_mut_ptr(), buf.nulls.as_mut_ptr()) };
    }

    /// The row to return: the new tuple itself, or one formed from `row` when it changed.
    /// `appended`: the only change is the last column going from NULL to this 4-byte value.
    fn result(&self, row: &mut Deformed, changed: bool, appended: Option<pg_sys::Datum>) -> PgHeapTuple<'static, AllocatedByPostgres> {
        let tuple = if changed {
            unsafe {
                let t = match appended.and_then(|v| self.append_last_int4(v)) {
                    Some(t) => {
                        // Every dev build (the test suites) checks the shortcut against the
                        // general path, byte for byte.
                        #[cfg(debug_assertions)]
                        {
                            let f = pg_sys::heap_form_tuple(self.tupdesc, row.values.as_mut_ptr(), row.nulls.as_mut_ptr());
                            // From t_infomask2 on: the datum fields and t_ctid before it are
                            // overwritten when the row is stored.
                            let from = std::mem::offset_of!(pg_sys::HeapTupleHeaderData, t_infomask2);
                            let bytes = |t: pg_sys::HeapTuple| {
                                std::slice::from_raw_parts((*t).t_data as *const u8, (*t).t_len as usize).get(from..)
                            };
                            let (a, b) = (bytes(t), bytes(f));
                            assert!(a == b, "append_last_int4 differs from heap_form_tuple: {a:?} vs {b:?}");
                            pg_sys::heap_freetuple(f);
                        }
                        t
                    }
                    None => pg_sys::heap_form_tuple(self.tupdesc, row.values.as_mut_ptr(), row.nulls.as_mut_ptr()),
                };
                // As heap_modify_tuple does: keep the identity of the tuple being replaced.
                (*(*t).t_data).t_ctid = (*(*self.new).t_data).t_ctid;
                (*t).t_self = (*self.new).t_self;
                (*t).t_tableOid = (*self.new).t_tableOid;
                t
            }
        } else {
            self.new
        };
        unsafe { PgHeapTuple::from_heap_tuple(PgTupleDesc::from_pg_unchecked(self.tupdesc), tuple) }
    }

    /// What `heap_form_tuple` makes of the new tuple with its last column, NULL there, set to
    /// the 4-byte by-value `value` and nothing else changed: the tuple's bytes with the value
    /// appended (at int alignment) and its null bit set, or, when it was the only NULL, the null
    /// bitmap dropped. A classification column added to an existing table is its last column,
    /// so this is the usual governed insert. None when the layout differs (the caller then
    /// forms the tuple from its columns).
    ///
    /// # Safety
    /// `self.new` is a valid heap tuple of `self.tupdesc`.
    unsafe fn append_last_int4(&self, value: pg_sys::Datum) -> Option<pg_sys::HeapTuple> {
        unsafe {
            let natts = self.natts();
            let last = self.attr(natts.checked_sub(1)?);
            if last.attisdropped || last.attlen != 4 || !last.attbyval || last.attalign != b'i' as std::ffi::c_char {
                return None;
            }
            let old = self.new;
            let hdr = (*old).t_data;
            let infomask = u32::from((*hdr).t_infomask);
            if infomask & pg_sys::HEAP_HASNULL == 0 || u32::from((*hdr).t_infomask2) & pg_sys::HEAP_NATTS_MASK != natts as u32 {
                return None;
            }
            let bits_at = std::mem::offset_of!(pg_sys::HeapTupleHeaderData, t_bits);
            let bits = std::slice::from_raw_parts((hdr as *const u8).add(bits_at), natts.div_ceil(8));
            let (last_byte, last_bit) = ((natts - 1) / 8, 1u8 << ((natts - 1) % 8));
            if bits[last_byte] & last_bit != 0 {
                return None;
            }
            // Another NULL keeps the bitmap; without one, heap_form_tuple writes none, which
            // leaves the header size unchanged only when the bitmap fitted in its padding.
            let other_nulls = (0..natts - 1).any(|i| bits[i / 8] & (1 << (i % 8)) == 0);
            let hoff = usize::from((*hdr).t_hoff);
            if !other_nulls && maxalign(bits_at) != hoff {
                return None;
            }
            let old_len = (*old).t_len as usize;
            let at = hoff + ((old_len - hoff + 3) & !3);
            let len = at + 4;
            let header_size = maxalign(std::mem::size_of::<pg_sys::HeapTupleData>());
            let t: pg_sys::HeapTuple = pg_sys::palloc0(header_size + len).cast();
            let td = (t as *mut u8).add(header_size);
            std::ptr::copy_nonoverlapping(hdr as *const u8, td, old_len);
            (*t).t_len = len as u32;
            (*t).t_data = td.cast();
            let nh = td as *mut pg_sys::HeapTupleHeaderData;
            // The datum length for the new size (the row type fields are copied; storing the
            // row overwrites all three, and t_ctid, anyway).
            pgrx::varlena::set_varsize_4b(td.cast(), len as i32);
            if other_nulls {
                *td.add(bits_at + last_byte) |= last_bit;
            } else {
                (*nh).t_infomask &= !(pg_sys::HEAP_HASNULL as u16);
                std::ptr::write_bytes(td.add(bits_at), 0, bits.len());
            }
            // A palloc'd chunk plus a MAXALIGNed header size: `at` is int-aligned in memory.
            (td.add(at) as *mut u32).write(value.value() as u32);
            Some(t)
        }
    }
}

/// The row of an INSERT row trigger, BEFORE or AFTER, read by column name: memory_ext's own
/// tables' triggers (their layout is the extension's, so no mapping is cached).
pub struct InsertedRow<'a> {
    td: &'a pg_sys::TriggerData,
    tupdesc: pg_sys::TupleDesc,
    tuple: pg_sys::HeapTuple,
}

impl<'a> InsertedRow<'a> {
    /// The inserted row, when `td` is the firing of a row trigger on INSERT at that timing.
    pub fn new(td: &'a pg_sys::TriggerData, fname: &str, before: bool) -> Result<Self, MxError> {
        let ev = td.tg_event;
        let timing = ev & pg_sys::TRIGGER_EVENT_TIMINGMASK;
        let ok_timing = if before { timing == pg_sys::TRIGGER_EVENT_BEFORE } else { timing == pg_sys::TRIGGER_EVENT_AFTER };
        if !ok_timing || ev & pg_sys::TRIGGER_EVENT_ROW == 0 || ev & pg_sys::TRIGGER_EVENT_OPMASK != pg_sys::TRIGGER_EVENT_INSERT {
            let when = if before { "BEFORE" } else { "AFTER" };
            return Err(MxError::new(TRIGGER_PROTOCOL, format!("{fname} must be fired {when} INSERT FOR EACH ROW")));
        }
        // SAFETY: the trigger's relation is open while the trigger runs.
        let tupdesc = unsafe { (*td.tg_relation).rd_att };
        Ok(InsertedRow { td, tupdesc, tuple: td.tg_trigtuple })
    }

    pub fn relid(&self) -> pg_sys::Oid {
        trigger_relid(self.td)
    }

    /// The command of this transaction that inserted the row (its cmin, through a combo command
    /// id if the row was changed since).
    pub fn command_id(&self) -> pg_sys::CommandId {
        // SAFETY: the trigger's tuple, inserted by this transaction, and its header, alive for
        // the call.
        unsafe { pg_sys::HeapTupleHeaderGetCmin((*self.tuple).t_data) }
    }

    /// Attribute number (1-based) and type of the live column `name`.
    fn column(&self, name: &str) -> Result<(i32, pg_sys::Oid), MxError> {
        // SAFETY: the trigger's descriptor is valid while it runs; find_attr returns an index below natts.
        unsafe {
            match find_attr(self.tupdesc, name) {
                Some(i) => Ok((i as i32 + 1, (*crate::pg::tupdesc_attr(self.tupdesc, i)).atttypid)),
                None => Err(MxError::new(TRIGGER_PROTOCOL, format!("{} has no column \"{name}\"", trigger_relation_name(self.td)))),
            }
        }
    }

    /// Column `name`, None for NULL.
    pub fn datum(&self, name: &str) -> Result<Option<pg_sys::Datum>, MxError> {
        let (attnum, _) = self.column(name)?;
        let mut isnull = false;
        // SAFETY: the trigger's tuple with its relation's descriptor and a live attribute number.
        let d = unsafe { pg_sys::heap_getattr(self.tuple, attnum, self.tupdesc, &mut isnull) };
        Ok((!isnull).then_some(d))
    }

    /// Column `name` (text or varchar) as text, an owned copy (a detoasted value lives in the
    /// memory context current at the call, which may end before the trigger does), None for NULL.
    pub fn text(&self, name: &str) -> Result<Option<String>, MxError> {
        let (_, typoid) = self.column(name)?;
        if !is_text(typoid) {
            return Err(MxError::new(TRIGGER_PROTOCOL, format!("column \"{name}\" of {} is not text", trigger_relation_name(self.td))));
        }
        // SAFETY: a non-NULL datum of a text column of this trigger's row, alive for the call;
        // the bytes are copied before anything else runs.
        Ok(self.datum(name)?.map(|d| as_str(unsafe { text_bytes(d) }, database_is_utf8()).to_owned()))
    }

    /// The data bytes (after the header, detoasted) of the varlena column `name` (text, jsonb,
    /// bytea...), an owned copy, None for NULL.
    pub fn bytes(&self, name: &str) -> Result<Option<Vec<u8>>, MxError> {
        let (attnum, _) = self.column(name)?;
        // SAFETY: the column's attribute length says whether it is a varlena.
        let varlena = unsafe { (*crate::pg::tupdesc_attr(self.tupdesc, attnum as usize - 1)).attlen == -1 };
        if !varlena {
            return Err(MxError::new(TRIGGER_PROTOCOL, format!("column \"{name}\" of {} is not a varlena", trigger_relation_name(self.td))));
        }
        // SAFETY: a non-NULL varlena datum of this trigger's row; its bytes are copied at once.
        Ok(self.datum(name)?.map(|d| unsafe { text_bytes(d) }.to_vec()))
    }

    /// The 16 bytes of the uuid column `name`, None for NULL.
    pub fn uuid(&self, name: &str) -> Result<Option<[u8; 16]>, MxError> {
        let (_, typoid) = self.column(name)?;
        if typoid != pg_sys::UUIDOID {
            return Err(MxError::new(TRIGGER_PROTOCOL, format!("column \"{name}\" of {} is not a uuid", trigger_relation_name(self.td))));
        }
        // SAFETY: a non-NULL uuid datum of this trigger's row points at its 16 bytes.
        Ok(self.datum(name)?.map(|d| unsafe { std::ptr::read_unaligned(d.cast_mut_ptr::<[u8; 16]>()) }))
    }

    /// Column `name` of a by-value integer or timestamp type (int2, int4, int8, timestamptz).
    pub fn int(&self, name: &str) -> Result<Option<i64>, MxError> {
        let (_, typoid) = self.column(name)?;
        let d = self.datum(name)?;
        Ok(match typoid {
            pg_sys::INT2OID => d.map(|d| d.value() as i16 as i64),
            pg_sys::INT4OID => d.map(|d| d.value() as i32 as i64),
            pg_sys::INT8OID | pg_sys::TIMESTAMPTZOID => d.map(|d| d.value() as i64),
            _ => return Err(MxError::new(TRIGGER_PROTOCOL, format!("column \"{name}\" of {} is not an integer", trigger_relation_name(self.td)))),
        })
    }

    /// The row, unchanged, as a BEFORE trigger's result.
    pub fn unchanged(&self) -> PgHeapTuple<'static, AllocatedByPostgres> {
        // SAFETY: the trigger's tuple with its relation's descriptor.
        unsafe { PgHeapTuple::from_heap_tuple(PgTupleDesc::from_pg_unchecked(self.tupdesc), self.tuple) }
    }

    /// The row with the int2 column `name` set to `value`, as a BEFORE trigger's result.
    pub fn with_int2(&self, name: &str, value: Option<i16>) -> Result<PgHeapTuple<'static, AllocatedByPostgres>, MxError> {
        let (attnum, typoid) = self.column(name)?;
        if typoid != pg_sys::INT2OID {
            return Err(MxError::new(TRIGGER_PROTOCOL, format!("column \"{name}\" of {} is not smallint", trigger_relation_name(self.td))));
        }
        let mut cols = [attnum];
        let mut values = [pg_sys::Datum::from(value.unwrap_or(0))];
        let mut nulls = [value.is_none()];
        // SAFETY: the trigger's tuple and descriptor, one live attribute number with a by-value
        // datum of its type; heap_modify_tuple_by_cols keeps the tuple's identity fields.
        unsafe {
            let t = pg_sys::heap_modify_tuple_by_cols(self.tuple, self.tupdesc, 1, cols.as_mut_ptr(), values.as_mut_ptr(), nulls.as_mut_ptr());
            Ok(PgHeapTuple::from_heap_tuple(PgTupleDesc::from_pg_unchecked(self.tupdesc), t))
        }
    }
}

thread_local! {
    // The retention module's policies, registered from its init (so the classify trigger, which
    // stamps, does not depend on the retention module).
    static STAMP_POLICIES: Cell<Option<&'static dyn StampPolicies>> = const { Cell::new(None) };
}

/// Registers where stamping finds its policies.
pub fn register_stamp_policies(p: &'static dyn StampPolicies) {
    STAMP_POLICIES.with(|c| c.set(Some(p)));
}

/// Where stamping finds its policies (implemented by the retention module), in microseconds.
pub trait StampPolicies {
    /// Retention and grace of a tier in an org (None: indefinite).
    fn tier(&self, org: Option<&str>, tier: Tier) -> Result<(Option<i64>, i64), MxError>;
    /// TTL and archive age of a memory type.
    fn memory_type(&self, label: &str) -> Result<(Option<i64>, Option<i64>), MxError>;
}

/// A deformed row: one datum and null flag per attribute.
#[derive(Default)]
pub struct Deformed {
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

impl Deformed {
    fn get(&self, c: &Col) -> Option<pg_sys::Datum> {
        if self.nulls[c.idx] {
            None
        } else {
            Some(self.values[c.idx])
        }
    }

    fn set(&mut self, c: &Col, d: pg_sys::Datum) {
        self.values[c.idx] = d;
        self.nulls[c.idx] = false;
    }

    fn set_null(&mut self, c: &Col) {
        self.values[c.idx] = pg_sys::Datum::from(0);
        self.nulls[c.idx] = true;
    }
}

/// A mapped column and what the cache re-checks on every hit.
struct Col {
    idx: usize,
    name: String,
    typoid: pg_sys::Oid,
    byval: bool,
    len: i16,
}

#[derive(Clone, Copy)]
enum TargetKind {
    /// An enum with the four classification labels: label OIDs by tier.
    Enum([pg_sys::Oid; 4]),
    Text,
    Jsonb,
}

#[derive(Clone, Copy)]
enum SourceTypeKind {
    Enum,
    Text,
}

/// Retention stamp columns (all timestamptz) and the optional memory-type column.
struct StampCols {
    created: Col,
    expires: Col,
    purge: Col,
    archive: Col,
    memory_type: Option<(Col, SourceTypeKind)>,
    /// Memory-type enum labels seen (label OID -> label).
    labels: Vec<(pg_sys::Oid, String)>,
}

/// The column mapping of one classify trigger, resolved against its relation.
pub struct ClassifyColumns {
    tgoid: pg_sys::Oid,
    relid: pg_sys::Oid,
    tupdesc: pg_sys::TupleDesc,
    natts: usize,
    content: Col,
    files: Option<Col>,
    source_type: Option<(Col, SourceTypeKind)>,
    org: Option<Col>,
    targets: Vec<(Col, TargetKind)>,
    /// Source-type enum labels seen by this mapping (label OID -> source type).
    labels: Vec<(pg_sys::Oid, Option<SourceType>)>,
    stamps: Option<StampCols>,
    /// Set by `stamp`, consumed by `store`.
    stamped: bool,
    /// The database encoding is UTF-8 (so its text is valid UTF-8).
    utf8: bool,
    new: Deformed,
    old: Deformed,
}

thread_local! {
    // The last mapping used. A statement fires one trigger per row, so one slot catches nearly
    // every row; the mapping is taken out while in use and put back after.
    static MAPPING: RefCell<Option<Box<ClassifyColumns>>> = const { RefCell::new(None) };
    // An invalidation arrived while the mapping was taken out (a cache miss of the row ran SPI):
    // it is not put back.
    static MAPPING_STALE: Cell<bool> = const { Cell::new(false) };
    // Enum type OID -> label OIDs in tier order. Label OIDs of a type never change, and a
    // re-created type has a new OID, so entries never go stale.
    static TIER_ENUMS: RefCell<Vec<(pg_sys::Oid, [pg_sys::Oid; 4])>> = const { RefCell::new(Vec::new()) };
    // Enum label OID -> source type (None: a label that is not a source type).
    static SOURCE_TYPE_LABELS: RefCell<Vec<(pg_sys::Oid, Option<SourceType>)>> = const { RefCell::new(Vec::new()) };
}

/// Relcache invalidation of `relid` (InvalidOid: of every relation): drop the cached mapping
/// when it belongs to that relation.
pub fn forget_mapping(relid: pg_sys::Oid) {
    MAPPING.with(|c| {
        let mut slot = c.borrow_mut();
        match slot.as_ref() {
            None => MAPPING_STALE.with(|s| s.set(true)),
            Some(m) if relid == pg_sys::InvalidOid || m.relid == relid => *slot = None,
            Some(_) => {}
        }
    });
}

fn tier_enum_oids(typoid: pg_sys::Oid) -> Option<[pg_sys::Oid; 4]> {
    if let Some(o) = TIER_ENUMS.with(|m| m.borrow().iter().find(|e| e.0 == typoid).map(|e| e.1)) {
        return Some(o);
    }
    let mut out = [pg_sys::InvalidOid; 4];
    for (i, t) in Tier::ALL.iter().enumerate() {
        out[i] = super::spi::read_one::<pg_sys::Oid>(
            "SELECT oid FROM pg_catalog.pg_enum WHERE enumtypid = $1 AND enumlabel = $2",
            &[typoid.into(), t.as_str().into()],
        )
        .ok()
        .flatten()?;
    }
    TIER_ENUMS.with(|m| m.borrow_mut().push((typoid, out)));
    Some(out)
}

fn source_type_of_label(label_oid: pg_sys::Oid) -> Option<SourceType> {
    if let Some(s) = SOURCE_TYPE_LABELS.with(|m| m.borrow().iter().find(|e| e.0 == label_oid).map(|e| e.1)) {
        return s;
    }
    let (label, _, _) = pgrx::enum_helper::lookup_enum_by_oid(label_oid);
    let st = SourceType::parse(&label);
    SOURCE_TYPE_LABELS.with(|m| m.borrow_mut().push((label_oid, st)));
    st
}

fn is_text(typoid: pg_sys::Oid) -> bool {
    typoid == pg_sys::TEXTOID || typoid == pg_sys::VARCHAROID
}

/// Bytes of a text (or any varlena) datum, detoasting only when it is compressed or out of line.
///
/// # Safety
/// `d` is a non-NULL varlena datum, and the returned slice is not used after the memory holding
/// it (the row, or the detoasted copy in the current memory context) is freed: the caller picks
/// the lifetime `'a` to match.
pub(crate) unsafe fn text_bytes<'a>(d: pg_sys::Datum) -> &'a [u8] {
    unsafe {
        let mut v = d.cast_mut_ptr::<pg_sys::varlena>();
        if !(varlena::varatt_is_4b_u(v) || (varlena::varatt_is_1b(v) && !varlena::varatt_is_1b_e(v))) {
            v = pg_sys::pg_detoast_datum_packed(v);
        }
        varlena::varlena_to_byte_slice(v)
    }
}

/// The JSON text (jsonb_out) of a jsonb value given by its root container (the bytes after the
/// varlena header, as `text_bytes` returns them), appended to `out`; false when it cannot be
/// made.
pub(crate) fn jsonb_container_text(container: &[u8], out: &mut Vec<u8>) -> bool {
    // SAFETY: a palloc'd 4-byte-header varlena holding a copy of the container is a jsonb datum
    // (the container is one that a jsonb column stored), freed once read.
    unsafe {
        let len = container.len() + pg_sys::VARHDRSZ;
        let v = pg_sys::palloc(len).cast::<u8>();
        varlena::set_varsize_4b(v.cast(), len as i32);
        std::ptr::copy_nonoverlapping(container.as_ptr(), v.add(pg_sys::VARHDRSZ), container.len());
        let made = jsonb_out_into(pg_sys::Datum::from(v), out);
        pg_sys::pfree(v.cast());
        made
    }
}

/// The JSON text (jsonb_out) of the jsonb datum `d`, appended to `out`; false when it cannot be
/// made.
///
/// # Safety
/// `d` is a non-NULL jsonb datum.
pub(crate) unsafe fn jsonb_out_into(d: pg_sys::Datum, out: &mut Vec<u8>) -> bool {
    // jsonb_out returns a palloc'd C string, copied out and freed.
    unsafe {
        let Some(text) = direct_function_call_as_datum(pg_sys::jsonb_out, &[Some(d)]).filter(|t| !t.is_null()) else { return false };
        let p = text.cast_mut_ptr::<std::ffi::c_char>();
        out.extend_from_slice(CStr::from_ptr(p).to_bytes());
        pg_sys::pfree(p.cast());
        true
    }
}

/// Visit the non-NULL elements of a text[] datum without copying them (the walk of
/// array_iter_next in arrayaccess.h: elements are varlenas, each followed by int alignment).
///
/// A small array stored in a tuple has a 1-byte varlena header and is read in place: its bytes
/// after the header are those of the 4-byte-header array that detoasting would make, so offsets
/// and alignment are counted from where that array would start (3 bytes before this one).
///
/// # Safety
/// `d` is a non-NULL datum of a one-dimensional text[] (or varchar[]), and `visit` keeps the
/// element slices no longer than the array's memory lives (the caller picks `'a`).
unsafe fn text_array_elements<'a>(d: pg_sys::Datum, mut visit: impl FnMut(&'a [u8])) {
    unsafe {
        let mut v = d.cast_mut_ptr::<pg_sys::varlena>();
        let shift = if varlena::varatt_is_4b_u(v) {
            0
        } else if varlena::varatt_is_1b(v) && !varlena::varatt_is_1b_e(v) {
            3
        } else {
            v = pg_sys::pg_detoast_datum(v);
            0
        };
        let start = v as *const u8;
        // The byte at offset `o` of the unpacked array.
        let at = |o: usize| start.add(o - shift);
        let int = |o: usize| std::ptr::read_unaligned(at(o) as *const i32);
        let ndim = int(4) as usize;
        if ndim == 0 {
            return;
        }
        // ArrayType is vl_len_, ndim, dataoffset, elemtype; then dims, lower bounds, bitmap.
        let header = std::mem::size_of::<pg_sys::ArrayType>();
        let nitems: usize = (0..ndim).map(|i| int(header + 4 * i) as usize).product();
        let dataoffset = int(8) as usize;
        let bitmap = if dataoffset != 0 { Some(header + 8 * ndim) } else { None };
        let mut o = if dataoffset != 0 { dataoffset } else { maxalign(header + 8 * ndim) };
        for i in 0..nitems {
            if let Some(bm) = bitmap {
                if *at(bm + i / 8) & (1 << (i % 8)) == 0 {
                    continue;
                }
            }
            let (bytes, len) = element(at(o));
            visit(bytes);
            o = (o + len + 3) & !3;
        }
    }
}

/// An element varlena of an array (1- or 4-byte header, never toasted) at an address that may
/// be unaligned: its bytes and its whole size.
///
/// # Safety
/// `e` points at an element inside a live array; the caller picks `'a` no longer than it lives.
unsafe fn element<'a>(e: *const u8) -> (&'a [u8], usize) {
    unsafe {
        // The 1-byte header tests read one byte; the 4-byte header is copied out before use.
        if varlena::varatt_is_1b(e.cast()) {
            let size = varlena::varsize_1b(e.cast());
            (std::slice::from_raw_parts(e.add(1), size.saturating_sub(1)), size)
        } else {
            let header = std::ptr::read_unaligned(e as *const u32);
            let size = varlena::varsize_4b((&header as *const u32).cast());
            (std::slice::from_raw_parts(e.add(4), size.saturating_sub(4)), size)
        }
    }
}

pub(crate) fn database_is_utf8() -> bool {
    unsafe { pg_sys::GetDatabaseEncoding() == pg_sys::pg_enc::PG_UTF8 as i32 }
}

/// Text bytes of a datum as `&str`. PostgreSQL validates text against the database encoding,
/// so in a UTF-8 database (`utf8`) the bytes are valid UTF-8; elsewhere bytes that are not stand
/// in as a replacement character (paths and ids are matched as ASCII, which such text cannot be).
pub(crate) fn as_str(bytes: &[u8], utf8: bool) -> &str {
    if utf8 {
        // SAFETY: text of a UTF-8 database is valid UTF-8 (checked on input by PostgreSQL).
        unsafe { std::str::from_utf8_unchecked(bytes) }
    } else {
        std::str::from_utf8(bytes).unwrap_or("\u{fffd}")
    }
}

fn parse_tier(label: &[u8], column: &str) -> Result<Tier, MxError> {
    std::str::from_utf8(label).ok().and_then(Tier::parse).ok_or_else(|| {
        MxError::bad_argument(format!("invalid classification \"{}\" in column \"{column}\"", String::from_utf8_lossy(label)))
            .hint("Use one of: public, internal, confidential, restricted.")
    })
}

// JB_FOBJECT from utils/jsonb.h: the root container of a jsonb value is an object.
const JB_FOBJECT: u32 = 0x2000_0000;

/// Whether a jsonb datum's root is an object.
///
/// # Safety
/// `datum` is a non-NULL jsonb datum.
unsafe fn jsonb_is_object(datum: pg_sys::Datum) -> bool {
    unsafe {
        let v = pg_sys::pg_detoast_datum(datum.cast_mut_ptr());
        let header = *(varlena::vardata_any(v) as *const u32);
        header & JB_FOBJECT != 0
    }
}

/// `d->>'classification'`.
///
/// # Safety
/// `d` is a non-NULL jsonb datum.
unsafe fn jsonb_classification(d: pg_sys::Datum) -> Option<pg_sys::Datum> {
    unsafe { direct_function_call_as_datum(pg_sys::jsonb_object_field_text, &[Some(d), "classification".into_datum()]) }
}

/// Whether two datums of one column have the same stored image (datum_image_eq in C, which pgrx
/// does not bind). Differently compressed copies of one value count as different; the caller
/// then re-classifies, which is merely redundant.
///
/// # Safety
/// `x` and `y` are non-NULL datums of column `c` (by value, or pointing at values of its type).
unsafe fn same_image(x: pg_sys::Datum, y: pg_sys::Datum, c: &Col) -> bool {
    if c.byval {
        return x.value() == y.value();
    }
    unsafe {
        let (a, b): (&[u8], &[u8]) = if c.len == -1 {
            let (pa, pb) = (x.cast_mut_ptr::<pg_sys::varlena>(), y.cast_mut_ptr::<pg_sys::varlena>());
            (
                std::slice::from_raw_parts(pa as *const u8, varlena::varsize_any(pa)),
                std::slice::from_raw_parts(pb as *const u8, varlena::varsize_any(pb)),
            )
        } else if c.len > 0 {
            let n = c.len as usize;
            (std::slice::from_raw_parts(x.cast_mut_ptr::<u8>(), n), std::slice::from_raw_parts(y.cast_mut_ptr::<u8>(), n))
        } else {
            return false;
        };
        a == b
    }
}

impl ClassifyColumns {
    /// The mapping for this firing: the cached one when it still describes the relation, else
    /// resolved from TG_ARGV. Put it back with `release` when done with the row.
    pub fn acquire(row: &RowTrigger) -> Result<Box<Self>, MxError> {
        MAPPING_STALE.with(|s| s.set(false));
        if let Some(m) = MAPPING.with(|c| c.borrow_mut().take()) {
            if m.still_valid(row) {
                return Ok(m);
            }
        }
        Self::resolve(row).map(Box::new)
    }

    pub fn release(self: Box<Self>) {
        if !MAPPING_STALE.with(|s| s.get()) {
            MAPPING.with(|c| *c.borrow_mut() = Some(self));
        }
    }

    /// The cached mapping belongs to this trigger and descriptor. A change to the relation (a
    /// column renamed, dropped or retyped, a trigger re-created) sends a relcache invalidation,
    /// which drops the cached mapping (`forget_mapping`) before the next row is seen; so a
    /// descriptor rebuilt at the same address never meets a stale mapping.
    fn still_valid(&self, row: &RowTrigger) -> bool {
        self.tgoid == row.tgoid() && self.relid == row.relid() && self.tupdesc == row.tupdesc && self.natts == row.natts()
    }

    fn resolve(row: &RowTrigger) -> Result<Self, MxError> {
        let args = ClassifyArgs::parse(&row.args()).map_err(|e| {
            MxError::new(TRIGGER_PROTOCOL, format!("{e} (on {})", row.relname())).hint("Attach it with memory.govern(table, options).")
        })?;
        let content = row.column(&args.content, "content")?;
        if !is_text(content.typoid) {
            return Err(MxError::bad_argument(column_type_message("content", &args.content, &row.relname())));
        }
        let files = match &args.source_files {
            None => None,
            Some(f) => Some(row.column(f, "source_files")?),
        };
        if let (Some(f), Some(name)) = (&files, &args.source_files) {
            if f.typoid != pg_sys::TEXTARRAYOID && f.typoid != pg_sys::VARCHARARRAYOID {
                return Err(MxError::bad_argument(column_type_message("source_files", name, &row.relname())));
            }
        }
        let source_type = match &args.source_type {
            None => None,
            Some(name) => {
                let c = row.column(name, "source_type")?;
                // SAFETY: a catalog lookup of a type oid.
                let kind = if unsafe { pg_sys::type_is_enum(c.typoid) } {
                    SourceTypeKind::Enum
                } else if is_text(c.typoid) {
                    SourceTypeKind::Text
                } else {
                    return Err(MxError::bad_argument(column_type_message("source_type", name, &row.relname())));
                };
                Some((c, kind))
            }
        };
        let mut targets = Vec::with_capacity(args.targets.len());
        for t in &args.targets {
            targets.push(Self::target(row, t)?);
        }
        let org = match &args.org {
            None => None,
            Some(c) => Some(row.column(c, "org")?),
        };
        let stamps = match &args.stamps {
            None => None,
            Some(s) => Some(Self::stamp_columns(row, s)?),
        };
        Ok(ClassifyColumns {
            tgoid: row.tgoid(),
            relid: row.relid(),
            tupdesc: row.tupdesc,
            natts: row.natts(),
            content,
            files,
            source_type,
            org,
            targets,
            labels: Vec::new(),
            stamps,
            stamped: false,
            utf8: database_is_utf8(),
            new: Deformed::default(),
            old: Deformed::default(),
        })
    }

    /// The retention stamp columns the arguments name.
    fn stamp_columns(row: &RowTrigger, spec: &StampArgs) -> Result<StampCols, MxError> {
        let ts = |name: &str, role: &str| -> Result<Col, MxError> {
            let c = row.column(name, role)?;
            if c.typoid != pg_sys::TIMESTAMPTZOID {
                return Err(MxError::bad_argument(column_type_message(role, name, &row.relname())));
            }
            Ok(c)
        };
        let memory_type = match &spec.memory_type {
            None => None,
            Some(name) => {
                let c = row.column(name, "memory_type")?;
                // SAFETY: a catalog lookup of a type oid.
                let kind = if unsafe { pg_sys::type_is_enum(c.typoid) } { SourceTypeKind::Enum } else { SourceTypeKind::Text };
                Some((c, kind))
            }
        };
        Ok(StampCols {
            created: ts(&spec.created, "created_at")?,
            expires: ts(&spec.expires, "expires_at")?,
            purge: ts(&spec.purge, "purge_after")?,
            archive: ts(&spec.archive, "archive_at")?,
            memory_type,
            labels: Vec::new(),
        })
    }

    pub fn has_stamps(&self) -> bool {
        self.stamps.is_some()
    }

    /// UPDATE: whether expires_at, purge_after or archive_at moved later than the old row's (or
    /// to NULL, never), and whether created_at moved later. An UPDATE never lengthens retention:
    /// lengthened stamps are computed again, and a later creation time is refused; moving a stamp
    /// earlier (shorter retention) is kept.
    pub fn stamps_lengthened(&self) -> (bool, bool) {
        let Some(st) = self.stamps.as_ref() else { return (false, false) };
        if self.old.values.is_empty() {
            return (false, false);
        }
        let ts = |d: &Deformed, c: &Col| d.get(c).map(|v| v.value() as i64);
        let later = |c: &Col| match (ts(&self.old, c), ts(&self.new, c)) {
            (Some(o), Some(n)) => n > o,
            (Some(_), None) => true,
            _ => false,
        };
        let lengthened = [&st.expires, &st.purge, &st.archive].iter().any(|c| later(c));
        let created_later = match (ts(&self.old, &st.created), ts(&self.new, &st.created)) {
            (Some(o), Some(n)) => n > o,
            (None, Some(_)) => true,
            _ => false,
        };
        (lengthened, created_later)
    }

    /// Stamp expires_at, purge_after and archive_at of the new row for `tier`, with the
    /// registered (retention module's) policies.
    pub fn stamp(&mut self, tier: Tier) -> Result<(), MxError> {
        let policies = STAMP_POLICIES
            .with(Cell::get)
            .ok_or_else(|| MxError::new(super::error::code::INTERNAL, "no retention policies registered"))?;
        let org = self.org().map(str::to_string);
        let Some(st) = self.stamps.as_mut() else { return Ok(()) };
        let created = self
            .new
            .get(&st.created)
            .map(|d| d.value() as i64)
            .unwrap_or_else(super::xact::xact_start_micros);
        // ±infinity (PostgreSQL's DT_NOBEGIN / DT_NOEND) would stamp times no timestamptz holds.
        if created == i64::MIN || created == i64::MAX {
            return Err(MxError::bad_argument("created_at must be a finite time to stamp retention")
                .hint("Write a real creation time, or leave it to its default."));
        }
        // A creation time ahead of the transaction's would lengthen retention.
        if !memory_core::retention::created_at_allowed(created, super::xact::xact_start_micros()) {
            return Err(MxError::bad_argument("created_at is more than 5 minutes after the transaction time")
                .hint("Write the time the memory was made (an import may backdate it), or leave it to its default."));
        }
        let (retention, grace) = policies.tier(org.as_deref(), tier)?;
        let label: Option<String> = match &st.memory_type {
            None => None,
            Some((c, kind)) => match self.new.get(c) {
                None => None,
                Some(d) => Some(match kind {
                    SourceTypeKind::Enum => {
                        let oid = pg_sys::Oid::from(d.value() as u32);
                        match st.labels.iter().find(|l| l.0 == oid) {
                            Some(l) => l.1.clone(),
                            None => {
                                let (l, _, _) = pgrx::enum_helper::lookup_enum_by_oid(oid);
                                st.labels.push((oid, l.clone()));
                                l
                            }
                        }
                    }
                    SourceTypeKind::Text => String::from_utf8_lossy(unsafe { text_bytes(d) }).into_owned(),
                }),
            },
        };
        let (ttl, archive) = match label {
            Some(l) => policies.memory_type(&l)?,
            None => (None, None),
        };
        let s = memory_core::retention::stamps(created, retention, grace, ttl, archive);
        for (col, v) in [(&st.expires, s.expires_at), (&st.purge, s.purge_after), (&st.archive, s.archive_at)] {
            match v {
                Some(t) => self.new.set(col, pg_sys::Datum::from(t)),
                None => self.new.set_null(col),
            }
        }
        self.stamped = true;
        Ok(())
    }

    fn target(row: &RowTrigger, column: &str) -> Result<(Col, TargetKind), MxError> {
        let c = row.column(column, "target")?;
        let kind = if c.typoid == pg_sys::JSONBOID {
            TargetKind::Jsonb
        } else if is_text(c.typoid) {
            TargetKind::Text
        } else if unsafe { pg_sys::type_is_enum(c.typoid) } {
            TargetKind::Enum(tier_enum_oids(c.typoid).ok_or_else(|| {
                MxError::bad_argument(format!("enum type of column \"{column}\" lacks the classification labels"))
            })?)
        } else {
            return Err(MxError::bad_argument(column_type_message("target", column, &row.relname())));
        };
        Ok((c, kind))
    }

    /// Deform the new (and, for UPDATE, the old) tuple of this firing.
    pub fn load(&mut self, row: &RowTrigger) {
        row.deform(row.new, &mut self.new);
        if let Some(old) = row.old {
            row.deform(old, &mut self.old);
        }
    }

    pub fn content(&self) -> &[u8] {
        self.new.get(&self.content).map(|d| unsafe { text_bytes(d) }).unwrap_or_default()
    }

    /// Call `f` with the non-NULL elements of the source-files array (empty when NULL).
    pub fn with_source_files<R>(&self, f: impl FnOnce(&[&str]) -> R) -> R {
        let Some(d) = self.files.as_ref().and_then(|c| self.new.get(c)) else { return f(&[]) };
        let mut paths: [&str; 8] = [""; 8];
        let mut more: Vec<&str> = Vec::new();
        let mut n = 0;
        unsafe {
            text_array_elements(d, |e| {
                let p = as_str(e, self.utf8);
                if n < paths.len() {
                    paths[n] = p;
                } else {
                    if more.is_empty() {
                        more.extend_from_slice(&paths);
                    }
                    more.push(p);
                }
                n += 1;
            });
        }
        if more.is_empty() {
            f(&paths[..n])
        } else {
            f(&more)
        }
    }

    pub fn source_type(&mut self) -> Result<Option<SourceType>, MxError> {
        let Some((c, kind)) = &self.source_type else { return Ok(None) };
        let Some(d) = self.new.get(c) else { return Ok(None) };
        match kind {
            SourceTypeKind::Enum => {
                let oid = pg_sys::Oid::from(d.value() as u32);
                let st = match self.labels.iter().find(|l| l.0 == oid) {
                    Some(l) => l.1,
                    None => {
                        let st = source_type_of_label(oid);
                        self.labels.push((oid, st));
                        st
                    }
                };
                st.map(Some).ok_or_else(|| MxError::bad_argument("source_type column holds a label that is not a memory.source_type"))
            }
            SourceTypeKind::Text => {
                let s = unsafe { text_bytes(d) };
                std::str::from_utf8(s).ok().and_then(SourceType::parse).map(Some).ok_or_else(|| {
                    MxError::bad_argument(format!("unknown source_type \"{}\"", String::from_utf8_lossy(s)))
                        .hint("Use one of: decision, fact, preference, tool_result.")
                })
            }
        }
    }

    pub fn org(&self) -> Option<&str> {
        let d = self.new.get(self.org.as_ref()?)?;
        std::str::from_utf8(unsafe { text_bytes(d) }).ok()
    }

    /// The least and the most restrictive valid tiers held by the target columns of the new
    /// (`old == false`) or old row, None when no target holds one. The least catches a direct
    /// downgrade of one target while another still holds the old tier.
    pub fn tiers(&self, old: bool) -> Result<Option<(Tier, Tier)>, MxError> {
        let row = if old { &self.old } else { &self.new };
        let mut range: Option<(Tier, Tier)> = None;
        for (c, kind) in &self.targets {
            let Some(d) = row.get(c) else { continue };
            let tier = match kind {
                TargetKind::Enum(oids) => {
                    let oid = pg_sys::Oid::from(d.value() as u32);
                    oids.iter().position(|o| *o == oid).map(|i| Tier::ALL[i])
                }
                TargetKind::Text => Some(parse_tier(unsafe { text_bytes(d) }, &c.name)?),
                TargetKind::Jsonb => {
                    // SAFETY: a non-NULL datum of a jsonb target column of this row.
                    if !unsafe { jsonb_is_object(d) } {
                        return Err(MxError::bad_argument(format!("column \"{}\" must hold a JSON object to receive \"classification\"", c.name)));
                    }
                    // SAFETY: as above.
                    match unsafe { jsonb_classification(d) } {
                        None => None,
                        Some(v) => Some(parse_tier(unsafe { text_bytes(v) }, &c.name)?),
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

    /// Whether any classification input differs between the old and the new row.
    pub fn inputs_changed(&self) -> bool {
        let cols = [Some(&self.content), self.files.as_ref(), self.source_type.as_ref().map(|s| &s.0), self.org.as_ref()];
        cols.into_iter().flatten().any(|c| match (self.old.get(c), self.new.get(c)) {
            (None, None) => false,
            // SAFETY: two non-NULL datums of column c, of this trigger's old and new rows.
            (Some(x), Some(y)) => !unsafe { same_image(x, y, c) },
            _ => true,
        })
    }

    /// The row to store, with every target column holding `tier`.
    pub fn store(&mut self, row: &RowTrigger, tier: Tier) -> PgHeapTuple<'static, AllocatedByPostgres> {
        let stamped = std::mem::take(&mut self.stamped);
        // The one change, when it is an enum target at the end of the row that was NULL.
        let (mut n_changed, mut appended) = (0, None);
        for (c, kind) in &self.targets {
            let cur = self.new.get(c);
            let value = match kind {
                TargetKind::Enum(oids) => {
                    let want = oids[tier as usize];
                    if cur.map(|d| pg_sys::Oid::from(d.value() as u32)) == Some(want) {
                        continue;
                    }
                    pg_sys::Datum::from(want)
                }
                TargetKind::Text => {
                    if cur.map(|d| unsafe { text_bytes(d) }) == Some(tier.as_str().as_bytes()) {
                        continue;
                    }
                    tier.as_str().into_datum().expect("text datum")
                }
                TargetKind::Jsonb => {
                    let patch = pgrx::JsonB(serde_json::json!({ "classification": tier.as_str() })).into_datum();
                    match cur {
                        None => patch.expect("jsonb datum"),
                        Some(d) => {
                            // SAFETY: a non-NULL jsonb target of this row; the text lives in the current context.
                            let same = unsafe { jsonb_classification(d) }.map(|v| unsafe { text_bytes(v) } == tier.as_str().as_bytes());
                            if same == Some(true) {
                                continue;
                            }
                            unsafe { direct_function_call_as_datum(pg_sys::jsonb_concat, &[Some(d), patch]) }.expect("jsonb datum")
                        }
                    }
                }
            };
            if matches!(kind, TargetKind::Enum(_)) && cur.is_none() && c.idx + 1 == self.natts {
                appended = Some(value);
            }
            self.new.set(c, value);
            n_changed += 1;
        }
        let appended = if stamped || n_changed != 1 { None } else { appended };
        row.result(&mut self.new, stamped || n_changed > 0, appended)
    }
}
