//! Raw row access for the attachable triggers: the firing row, its columns by name, a deformed
//! copy and the tuple formed back from it. This is the per-row hot path of a governed
//! `INSERT ... SELECT`, so a row is deformed once and formed once and no text round trips happen;
//! what the columns mean (the classify trigger's mapping, retention's stamps) is the capability
//! modules' business. The file is long because every raw access to a trigger's row stays in it, in
//! one `unsafe` layer, rather than spread over the capability modules.

use super::error::MxError;
use super::maxalign;
use super::varlena::{as_str, database_is_utf8, is_text, text_bytes};
use pgrx::prelude::*;
use pgrx::{IntoDatum, PgTupleDesc};
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
    // SAFETY: as the function's contract.
    unsafe { find_attr_from(desc, name, 0) }
}

/// `find_attr`, looking at index `from` first and then on, wrapping around: a caller looking up
/// columns in their table's order finds each at the first look.
///
/// # Safety
/// `desc` is a valid tuple descriptor for the duration of the call.
pub(crate) unsafe fn find_attr_from(desc: pg_sys::TupleDesc, name: &str, from: usize) -> Option<usize> {
    let name = name.as_bytes();
    // SAFETY: attrs holds natts entries; attname is a NUL-terminated NameData (NAMEDATALEN bytes),
    // so a name as long as it or longer never matches and nothing past it is read.
    unsafe {
        let natts = (*desc).natts as usize;
        (0..natts).map(|k| (from + k) % natts).find(|&i| {
            let a = &*crate::pg::tupdesc_attr(desc, i);
            let data = &a.attname.data;
            !a.attisdropped
                && name.len() < data.len()
                && data[name.len()] == 0
                && data[..name.len()].iter().zip(name).all(|(&c, &n)| c as u8 == n)
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

    pub fn natts(&self) -> usize {
        unsafe { (*self.tupdesc).natts as usize }
    }

    pub fn relname(&self) -> String {
        trigger_relation_name(self.td)
    }

    fn attr(&self, idx: usize) -> &pg_sys::FormData_pg_attribute {
        unsafe { &*crate::pg::tupdesc_attr(self.tupdesc, idx) }
    }

    /// The trigger's TG_ARGV, without copying them out of the relcache more than needed.
    pub fn args(&self) -> Vec<String> {
        unsafe {
            let tg = &*self.td.tg_trigger;
            (0..tg.tgnargs as usize)
                .map(|i| CStr::from_ptr(*tg.tgargs.add(i)).to_string_lossy().into_owned())
                .collect()
        }
    }

    /// The live column `name`, playing `role` in the trigger's mapping (for the message).
    pub fn column(&self, name: &str, role: &str) -> Result<Column, MxError> {
        // SAFETY: the trigger's descriptor is valid while it runs.
        let Some(idx) = (unsafe { find_attr(self.tupdesc, name) }) else {
            return Err(MxError::bad_argument(format!("table {} has no column \"{name}\" (the {role} column)", self.relname()))
                .hint("Fix the mapping with memory.govern(table, options)."));
        };
        let a = self.attr(idx);
        Ok(Column { idx, name: name.to_string(), typoid: a.atttypid, byval: a.attbyval, len: a.attlen })
    }

    /// Deform the new (and, for UPDATE, the old) row of this firing.
    pub fn load(&self, new: &mut Deformed, old: &mut Deformed) {
        self.deform(self.new, new);
        if let Some(t) = self.old {
            self.deform(t, old);
        }
    }

    fn deform(&self, tuple: pg_sys::HeapTuple, buf: &mut Deformed) {
        let n = self.natts();
        buf.values.resize(n, pg_sys::Datum::from(0));
        buf.nulls.resize(n, true);
        unsafe { pg_sys::heap_deform_tuple(tuple, self.tupdesc, buf.values.as_mut_ptr(), buf.nulls.as_mut_ptr()) };
    }

    /// The row to return: the new tuple itself, or one formed from `row` when it changed.
    /// `appended`: the only change is the last column going from NULL to this 4-byte value.
    pub fn result(&self, row: &mut Deformed, changed: bool, appended: Option<pg_sys::Datum>) -> PgHeapTuple<'static, AllocatedByPostgres> {
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

/// A deformed row: one datum and null flag per attribute.
#[derive(Default)]
pub struct Deformed {
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

impl Deformed {
    pub fn get(&self, c: &Column) -> Option<pg_sys::Datum> {
        if self.nulls[c.idx] {
            None
        } else {
            Some(self.values[c.idx])
        }
    }

    pub fn set(&mut self, c: &Column, d: pg_sys::Datum) {
        self.values[c.idx] = d;
        self.nulls[c.idx] = false;
    }

    pub fn set_null(&mut self, c: &Column) {
        self.values[c.idx] = pg_sys::Datum::from(0);
        self.nulls[c.idx] = true;
    }

    /// Whether nothing was deformed into it yet (no old row).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Column `c` of a by-value type as an integer (timestamptz: microseconds; an enum: its
    /// label oid), None for NULL.
    pub fn int(&self, c: &Column) -> Option<i64> {
        self.get(c).map(|d| d.value() as i64)
    }

    /// Column `c` (an enum) as its label oid, None for NULL.
    pub fn oid(&self, c: &Column) -> Option<pg_sys::Oid> {
        self.get(c).map(|d| pg_sys::Oid::from(d.value() as u32))
    }

    /// The bytes of the varlena column `c` (text, varchar), None for NULL.
    pub fn text(&self, c: &Column) -> Option<&[u8]> {
        if c.len != -1 {
            return None;
        }
        // SAFETY: a non-NULL varlena datum of the row deformed into self, alive for the trigger
        // call, which outlives the borrow.
        self.get(c).map(|d| unsafe { text_bytes(d) })
    }

    /// Call `visit` with the non-NULL elements of the text[] (or varchar[]) column `c`, as text
    /// in the database's encoding (see `varlena::as_str`); nothing for NULL.
    pub fn text_array<'a>(&'a self, c: &Column, utf8: bool, mut visit: impl FnMut(&'a str)) {
        if c.typoid != pg_sys::TEXTARRAYOID && c.typoid != pg_sys::VARCHARARRAYOID {
            return;
        }
        let Some(d) = self.get(c) else { return };
        // SAFETY: a non-NULL text[] datum of the deformed row, alive while self is borrowed.
        unsafe { super::varlena::text_array_elements(d, |e| visit(as_str(e, utf8))) }
    }

    /// Whether the jsonb column `c` holds an object, None for NULL (or another type).
    pub fn jsonb_is_object(&self, c: &Column) -> Option<bool> {
        if c.typoid != pg_sys::JSONBOID {
            return None;
        }
        // SAFETY: a non-NULL jsonb datum of the deformed row.
        self.get(c).map(|d| unsafe { super::varlena::jsonb_is_object(d) })
    }

    /// `c->>key` of the jsonb column `c`, None for NULL, absent or JSON null.
    pub fn jsonb_field_text(&self, c: &Column, key: &str) -> Option<&[u8]> {
        if c.typoid != pg_sys::JSONBOID {
            return None;
        }
        let d = self.get(c)?;
        // SAFETY: a non-NULL jsonb datum; the text made lives in the current memory context,
        // which the trigger call (and so the borrow) does not outlive.
        unsafe { super::varlena::jsonb_field_text(d, key).map(|v| text_bytes(v)) }
    }

    /// Set the jsonb column `c` to `c || patch` (to `patch` when NULL).
    pub fn jsonb_merge(&mut self, c: &Column, patch: serde_json::Value) {
        let patch = pgrx::JsonB(patch).into_datum().expect("jsonb datum");
        let merged = match self.get(c) {
            None => patch,
            // SAFETY: two non-NULL jsonb datums (the column's, and the patch just made).
            Some(d) if c.typoid == pg_sys::JSONBOID => unsafe { super::varlena::jsonb_concat(d, patch) }.expect("jsonb datum"),
            Some(_) => return,
        };
        self.set(c, merged);
    }

    /// The uuid column `c`, None for NULL (or another type).
    pub fn uuid(&self, c: &Column) -> Option<pgrx::Uuid> {
        if c.typoid != pg_sys::UUIDOID {
            return None;
        }
        let d = self.get(c)?;
        let mut b = [0u8; 16];
        // SAFETY: a non-NULL uuid datum (a pointer to its 16 bytes) of the deformed row.
        b.copy_from_slice(unsafe { std::slice::from_raw_parts(d.cast_mut_ptr::<u8>(), 16) });
        Some(pgrx::Uuid::from_bytes(b))
    }

    /// The uuid[] column `c`: its dimensions and elements (None: a NULL element); None for NULL
    /// (or another type).
    pub fn uuid_array(&self, c: &Column) -> Option<(i32, Vec<Option<pgrx::Uuid>>)> {
        if c.typoid != pg_sys::UUIDARRAYOID {
            return None;
        }
        let d = self.get(c)?;
        // SAFETY: a non-NULL uuid[] datum of the deformed row, detoasted (a copy in the current
        // memory context when it was toasted) and read as the array it is.
        unsafe {
            let arr = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *mut pg_sys::ArrayType;
            let ndims = (*arr).ndim;
            let a = pgrx::Array::<pgrx::Uuid>::from_polymorphic_datum(pg_sys::Datum::from(arr), false, pg_sys::UUIDARRAYOID);
            Some((ndims, a.map(|a| a.iter().collect()).unwrap_or_default()))
        }
    }

    /// Set column `c` to a text value.
    pub fn set_text(&mut self, c: &Column, value: &str) {
        self.set(c, value.into_datum().expect("text datum"));
    }

    /// Whether column `c` has the same stored image in both rows (both NULL counts as the same).
    /// Differently compressed copies of one value count as different.
    pub fn same_as(&self, other: &Deformed, c: &Column) -> bool {
        match (self.get(c), other.get(c)) {
            (None, None) => true,
            // SAFETY: two non-NULL datums of column c, deformed from rows of its relation.
            (Some(x), Some(y)) => unsafe { super::varlena::same_image(x, y, c.byval, c.len) },
            _ => false,
        }
    }
}

/// A column of a trigger's relation (resolved once, kept with a cached mapping).
pub struct Column {
    pub idx: usize,
    pub name: String,
    pub typoid: pg_sys::Oid,
    byval: bool,
    len: i16,
}
