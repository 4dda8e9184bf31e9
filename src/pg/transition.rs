//! The rows of a statement trigger's transition table read straight from its tuplestore: no SPI
//! cursor, no plan, no executor. An agent's statement writes one row, and for it opening a cursor
//! over the transition table cost more than the rest of the audit append; a big statement is still
//! read through SPI in chunks (see audit::trigger).
//!
//! Each mapped column is read as the SQL cast `column::text` of audit_trigger's query would give
//! it, for the column types that trigger accepts (all built in, so no code of the table's owner
//! runs): text and varchar as they are, char without its trailing spaces (`rtrim1`, the
//! bpchar-to-text cast), name up to its NUL (`name_text`), uuid, integers and the classification
//! enum through their output functions (I/O coercion), and a jsonb tier as `->> 'classification'`.

use super::error::{code, MxError};
use pgrx::prelude::*;
use std::ffi::CStr;

/// Which transition table of the firing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Which {
    New,
    Old,
}

/// How one mapped column becomes text.
#[derive(Clone, Copy, Debug)]
enum AsText {
    /// text, varchar: the bytes as stored.
    Text,
    /// char(n): without trailing spaces.
    Bpchar,
    /// name: up to the first NUL.
    Name,
    /// uuid: as uuid_out writes it (lowercase hex, 8-4-4-4-12).
    Uuid,
    /// int2, int4, int8: in decimal, as their output functions write them.
    Int(pg_sys::Oid),
    /// The classification enum: the type's output function (built in).
    Output(pg_sys::Oid),
    /// jsonb: the `classification` member as text (`->>`), NULL when absent.
    JsonbClassification,
}

/// Where and how each output column of a read comes from (None: always NULL).
#[derive(Clone, Debug, Default)]
pub struct Columns {
    cols: Vec<Option<(usize, AsText)>>,
}

impl Columns {
    /// Plan the columns `names` of the trigger's relation, in order (None: a NULL column);
    /// `jsonb_tier` names the one read as `->> 'classification'`, and `classification` is the
    /// oid of memory.classification. The types must be ones audit_trigger accepts (it checks
    /// them first); any other is refused here too.
    pub fn plan(td: &pg_sys::TriggerData, names: &[Option<&str>], jsonb_tier: Option<usize>, classification: pg_sys::Oid) -> Result<Columns, MxError> {
        let mut cols = Vec::with_capacity(names.len());
        for (k, name) in names.iter().enumerate() {
            let Some(name) = name else {
                cols.push(None);
                continue;
            };
            // SAFETY: the trigger's relation and its descriptor are valid while the trigger runs;
            // find_attr returns an index below natts.
            let (attno, typ) = unsafe {
                let desc = (*td.tg_relation).rd_att;
                let Some(i) = super::tuple::find_attr(desc, name) else {
                    return Err(MxError::new(code::TRIGGER_PROTOCOL, format!("the column \"{name}\" does not exist")));
                };
                (i, (*crate::pg::tupdesc_attr(desc, i)).atttypid)
            };
            let how = match typ {
                pg_sys::JSONBOID if jsonb_tier == Some(k) => AsText::JsonbClassification,
                pg_sys::TEXTOID | pg_sys::VARCHAROID => AsText::Text,
                pg_sys::BPCHAROID => AsText::Bpchar,
                pg_sys::NAMEOID => AsText::Name,
                pg_sys::UUIDOID => AsText::Uuid,
                pg_sys::INT2OID | pg_sys::INT4OID | pg_sys::INT8OID => AsText::Int(typ),
                t if t != pg_sys::InvalidOid && t == classification => AsText::Output(output_function(t)),
                _ => return Err(MxError::new(code::TRIGGER_PROTOCOL, format!("the column \"{name}\" has a type memory.audit_trigger does not read"))),
            };
            cols.push(Some((attno, how)));
        }
        Ok(Columns { cols })
    }

    pub fn len(&self) -> usize {
        self.cols.len()
    }
}

fn output_function(typ: pg_sys::Oid) -> pg_sys::Oid {
    let (mut func, mut varlena) = (pg_sys::InvalidOid, false);
    // SAFETY: a built-in type's oid; getTypeOutputInfo raises an ERROR for an unknown type.
    unsafe { pg_sys::getTypeOutputInfo(typ, &mut func, &mut varlena) };
    func
}

/// How many rows the firing's transition table `which` holds (None: the firing has none).
pub fn count(td: &pg_sys::TriggerData, which: Which) -> Option<usize> {
    let ts = store(td, which);
    // SAFETY: a transition tuplestore of the running firing, alive until the firing ends.
    (!ts.is_null()).then(|| unsafe { pg_sys::tuplestore_tuple_count(ts) } as usize)
}

fn store(td: &pg_sys::TriggerData, which: Which) -> *mut pg_sys::Tuplestorestate {
    match which {
        Which::New => td.tg_newtable,
        Which::Old => td.tg_oldtable,
    }
}

/// The mapped columns of every row of a transition table, as text, copied out.
#[derive(Default)]
pub struct Rows {
    cols: usize,
    utf8: bool,
    buf: Vec<u8>,
    cells: Vec<Option<(usize, usize)>>,
}

impl Rows {
    /// Read the transition table `which` of the running firing `td` (it must have one).
    pub fn read(td: &pg_sys::TriggerData, which: Which, columns: &Columns) -> Result<Rows, MxError> {
        let ts = store(td, which);
        if ts.is_null() {
            return Err(MxError::new(code::INTERNAL, "the firing has no such transition table"));
        }
        // Room for the rows' cells (and their text, ids and short strings mostly) up front.
        let n = count(td, which).unwrap_or(0);
        let mut rows = Rows {
            cols: columns.len(),
            utf8: super::varlena::database_is_utf8(),
            buf: Vec::with_capacity(n.min(10_000) * 256),
            cells: Vec::with_capacity(n.min(10_000) * columns.len()),
        };
        // SAFETY: `ts` is a transition tuplestore of the running firing, holding tuples of the
        // trigger's relation in its row type (Postgres converts a partition's rows to it), so a
        // slot of that descriptor reads them; the read pointer is our own (other triggers of the
        // statement reading the same table select theirs, as NamedTuplestoreScan does), and a
        // transition tuplestore is made with EXEC_FLAG_REWIND, which the pointer asks for.
        // Conversions allocate in a context of their own, deleted before returning (on an ERROR
        // it goes with its parent). Attribute indexes come from Columns::plan on this relation's
        // descriptor (the plan is dropped when the relation changes).
        unsafe {
            let desc = (*td.tg_relation).rd_att;
            let natts = (*desc).natts;
            if columns.cols.iter().flatten().any(|&(i, _)| i >= natts as usize) {
                return Err(MxError::new(code::INTERNAL, "a transition column out of range"));
            }
            // The slot lives in the caller's context; what a row's read allocates (a tuple read
            // back from a spilled store, detoasted values, output strings) in `cx`, reset after
            // each row once the slot has let go of its tuple.
            // (One row, an agent's statement: what it allocates stays in the caller's context, as
            // the slot does.)
            let slot = pg_sys::MakeSingleTupleTableSlot(desc, &raw const pg_sys::TTSOpsMinimalTuple);
            let cx = if n > 1 {
                pg_sys::AllocSetContextCreateInternal(
                    pg_sys::CurrentMemoryContext,
                    c"memory_ext transition rows".as_ptr(),
                    pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
                    pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
                    pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
                )
            } else {
                pg_sys::CurrentMemoryContext
            };
            let old = pg_sys::MemoryContextSwitchTo(cx);
            let ptr = pg_sys::tuplestore_alloc_read_pointer(ts, pg_sys::EXEC_FLAG_REWIND as i32);
            pg_sys::tuplestore_select_read_pointer(ts, ptr);
            pg_sys::tuplestore_rescan(ts);
            while pg_sys::tuplestore_gettupleslot(ts, true, false, slot) {
                pg_sys::slot_getallattrs(slot);
                for col in &columns.cols {
                    let cell = match *col {
                        Some((i, how)) if !*(*slot).tts_isnull.add(i) => rows.put(*(*slot).tts_values.add(i), how),
                        _ => None,
                    };
                    rows.cells.push(cell);
                }
                pg_sys::ExecClearTuple(slot);
                if n > 1 {
                    pg_sys::MemoryContextReset(cx);
                }
            }
            pg_sys::MemoryContextSwitchTo(old);
            if n > 1 {
                pg_sys::MemoryContextDelete(cx);
            }
            pg_sys::ExecDropSingleTupleTableSlot(slot);
        }
        Ok(rows)
    }

    /// Append the text of datum `d` read as `how`.
    ///
    /// # Safety
    /// `d` is a non-NULL datum of the type `how` was planned for.
    unsafe fn put(&mut self, d: pg_sys::Datum, how: AsText) -> Option<(usize, usize)> {
        let start = self.buf.len();
        unsafe {
            match how {
                AsText::Text => self.buf.extend_from_slice(super::varlena::text_bytes(d)),
                AsText::Bpchar => {
                    let b = super::varlena::text_bytes(d);
                    let end = b.iter().rposition(|&c| c != b' ').map_or(0, |p| p + 1);
                    self.buf.extend_from_slice(&b[..end]);
                }
                AsText::Name => self.buf.extend_from_slice(CStr::from_ptr(d.cast_mut_ptr::<std::ffi::c_char>()).to_bytes()),
                AsText::Uuid => {
                    let bytes = std::ptr::read_unaligned(d.cast_mut_ptr::<[u8; 16]>());
                    memory_core::audit::write_uuid(&bytes, &mut self.buf);
                }
                AsText::Int(t) => {
                    let v: i64 = match t {
                        pg_sys::INT2OID => i64::from(d.value() as i16),
                        pg_sys::INT4OID => i64::from(d.value() as i32),
                        _ => d.value() as i64,
                    };
                    self.buf.extend_from_slice(v.to_string().as_bytes());
                }
                AsText::Output(f) => self.buf.extend_from_slice(CStr::from_ptr(pg_sys::OidOutputFunctionCall(f, d)).to_bytes()),
                AsText::JsonbClassification => {
                    let t = pgrx::direct_function_call_as_datum(
                        pg_sys::jsonb_object_field_text,
                        &[Some(d), pgrx::IntoDatum::into_datum("classification")],
                    )?;
                    self.buf.extend_from_slice(super::varlena::text_bytes(t));
                }
            }
        }
        Some((start, self.buf.len() - start))
    }

    pub fn len(&self) -> usize {
        if self.cols == 0 {
            0
        } else {
            self.cells.len() / self.cols
        }
    }

    /// Bytes of column `c` of row `i` (None for NULL).
    pub fn bytes(&self, i: usize, c: usize) -> Option<&[u8]> {
        self.cells[i * self.cols + c].map(|(s, n)| &self.buf[s..s + n])
    }

    /// Column `c` of row `i` as text (see `varlena::as_str`).
    pub fn text(&self, i: usize, c: usize) -> Option<&str> {
        self.bytes(i, c).map(|b| super::varlena::as_str(b, self.utf8))
    }
}
