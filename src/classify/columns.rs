//! The classify trigger's column mapping: which columns of a governed table hold the content,
//! source files, source type, org and the tier targets (memory.govern's options, passed as
//! TG_ARGV), resolved once per trigger and cached, read from and written to a deformed row.

use crate::errors::{code, MxError};
use crate::pg::tuple::{Column, Deformed, RowTrigger};
use crate::pg::varlena::{database_is_utf8, is_text, type_is_enum};
use crate::retention::stamp::StampColumns;
use super::lineage::{Floors, LineageColumns};
use memory_core::classify::{SourceType, Tier};
use memory_core::protocol::{column_type_message, ClassifyArgs};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

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

/// The column mapping of one classify trigger, resolved against its relation.
pub struct ClassifyColumns {
    tgoid: pg_sys::Oid,
    relid: pg_sys::Oid,
    tupdesc: usize,
    natts: usize,
    content: Column,
    files: Option<Column>,
    source_type: Option<(Column, SourceTypeKind)>,
    org: Option<Column>,
    targets: Vec<(Column, TargetKind)>,
    /// Source-type enum labels seen by this mapping (label OID -> source type).
    labels: Vec<(pg_sys::Oid, Option<SourceType>)>,
    stamps: Option<StampColumns>,
    /// A blank content is refused (`"content_required"`; always on memory.observations).
    content_required: bool,
    /// Set by `stamp`, consumed by `store`.
    stamped: bool,
    /// memory.observations' lineage columns (the classify trigger's lineage pass on INSERT).
    lineage: Option<LineageColumns>,
    /// Set when the lineage pass changed the row (its sources, source_type), consumed by `store`.
    touched: bool,
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
        out[i] = crate::pg::spi::read_one::<pg_sys::Oid>(
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

fn parse_tier(label: &[u8], column: &str) -> Result<Tier, MxError> {
    std::str::from_utf8(label).ok().and_then(Tier::parse).ok_or_else(|| {
        MxError::bad_argument(format!("invalid classification \"{}\" in column \"{column}\"", String::from_utf8_lossy(label)))
            .hint("Use one of: public, internal, confidential, restricted.")
    })
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
        self.tgoid == row.tgoid() && self.relid == row.relid() && self.tupdesc == row.tupdesc_key() && self.natts == row.natts()
    }

    fn resolve(row: &RowTrigger) -> Result<Self, MxError> {
        let args = ClassifyArgs::parse(&row.args()).map_err(|e| {
            MxError::new(code::TRIGGER_PROTOCOL, format!("{e} (on {})", row.relname())).hint("Attach it with memory.govern(table, options).")
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
                let kind = if type_is_enum(c.typoid) {
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
            // (memory.govern checks this too; a column retyped since is refused here.)
            Some(c) => match row.column(c, "org")? {
                col if is_text(col.typoid) => Some(col),
                _ => return Err(MxError::bad_argument(column_type_message("org", c, &row.relname()))),
            },
        };
        let stamps = match &args.stamps {
            None => None,
            Some(s) => Some(StampColumns::resolve(row, s)?),
        };
        Ok(ClassifyColumns {
            tgoid: row.tgoid(),
            relid: row.relid(),
            tupdesc: row.tupdesc_key(),
            natts: row.natts(),
            content,
            files,
            source_type,
            org,
            targets,
            labels: Vec::new(),
            stamps,
            content_required: args.content_required,
            stamped: false,
            lineage: LineageColumns::resolve(row)?,
            touched: false,
            utf8: database_is_utf8(),
            new: Deformed::default(),
            old: Deformed::default(),
        })
    }

    pub fn has_stamps(&self) -> bool {
        self.stamps.is_some()
    }

    /// UPDATE: whether the stamps moved later, and whether created_at did
    /// (`StampColumns::lengthened`).
    pub fn stamps_lengthened(&self) -> (bool, bool) {
        self.stamps.as_ref().map_or((false, false), |st| st.lengthened(&self.old, &self.new))
    }

    /// Stamp the new row's retention columns for `tier`, with the org's policies.
    pub fn stamp(&mut self, tier: Tier) -> Result<(), MxError> {
        let org = self.org().map(str::to_string);
        let Some(st) = self.stamps.as_mut() else { return Ok(()) };
        st.stamp(&mut self.new, org.as_deref(), tier)?;
        self.stamped = true;
        Ok(())
    }

    /// INSERT into memory.observations with `derived_from`: the sources checked and locked, the
    /// column kept with each once, the source_type lowered to the least trusted source's (before
    /// classification, which reads it); the floors, for the tier and the stamps. None without sources.
    pub fn lineage_floors(&mut self) -> Result<Option<Floors>, MxError> {
        let Some(l) = self.lineage.as_ref() else { return Ok(None) };
        let (ids, changed) = l.sources(&mut self.new)?;
        self.touched |= changed;
        let Some(ids) = ids else { return Ok(None) };
        let org = self.org().unwrap_or_default().to_string();
        let Some(l) = self.lineage.as_ref() else { return Ok(None) };
        let f = l.floors(&org, &ids)?;
        if let Some(st) = memory_core::lineage::trust_floor(self.source_type()?, f.worst) {
            self.set_source_type(st)?;
            self.touched = true;
        }
        Ok(Some(f))
    }

    /// The retention ceiling of the lineage pass, after the stamps.
    pub fn cap_retention(&mut self, f: &Floors) {
        if let Some(st) = self.stamps.as_ref() {
            if st.cap(&mut self.new, f.expires, f.purge) {
                self.touched = true;
            }
        }
    }

    /// Set the new row's source_type column (None: NULL).
    fn set_source_type(&mut self, st: Option<SourceType>) -> Result<(), MxError> {
        let Some((c, kind)) = self.source_type.as_ref() else { return Ok(()) };
        match (st, kind) {
            (None, _) => self.new.set_null(c),
            (Some(st), SourceTypeKind::Text) => self.new.set_text(c, st.as_str()),
            (Some(st), SourceTypeKind::Enum) => {
                let oid = crate::pg::spi::read_one::<pg_sys::Oid>(
                    "SELECT oid FROM pg_catalog.pg_enum WHERE enumtypid = $1 AND enumlabel = $2",
                    &[c.typoid.into(), st.as_str().into()],
                )
                .map_err(MxError::spi_in("lineage"))?
                .ok_or_else(|| MxError::bad_argument("source_type column lacks the memory.source_type labels"))?;
                self.labels.push((oid, Some(st)));
                self.new.set(c, pg_sys::Datum::from(oid));
            }
        }
        Ok(())
    }

    fn target(row: &RowTrigger, column: &str) -> Result<(Column, TargetKind), MxError> {
        let c = row.column(column, "target")?;
        let kind = if c.typoid == pg_sys::JSONBOID {
            TargetKind::Jsonb
        } else if is_text(c.typoid) {
            TargetKind::Text
        } else if type_is_enum(c.typoid) {
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
        row.load(&mut self.new, &mut self.old);
    }

    pub fn content(&self) -> &[u8] {
        self.new.text(&self.content).unwrap_or_default()
    }

    /// The new row's content is required and blank (memory_core::classify::is_blank), and the
    /// statement wrote it: an INSERT, or an UPDATE that changed the content. A row already blank
    /// (written before the rule, e.g. in 0.3.0) keeps its other columns writable. NULL is left
    /// to a NOT NULL constraint.
    pub fn blank_content_written(&self, is_update: bool) -> bool {
        self.content_required
            && self.new.text(&self.content).is_some_and(memory_core::classify::is_blank)
            && (!is_update || !self.old.same_as(&self.new, &self.content))
    }

    /// Call `f` with the non-NULL elements of the source-files array (empty when NULL).
    pub fn with_source_files<R>(&self, f: impl FnOnce(&[&str]) -> R) -> R {
        let Some(files) = self.files.as_ref() else { return f(&[]) };
        let mut paths: [&str; 8] = [""; 8];
        let mut more: Vec<&str> = Vec::new();
        let mut n = 0;
        self.new.text_array(files, self.utf8, |p| {
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
        if more.is_empty() {
            f(&paths[..n])
        } else {
            f(&more)
        }
    }

    pub fn source_type(&mut self) -> Result<Option<SourceType>, MxError> {
        let Some((c, kind)) = &self.source_type else { return Ok(None) };
        match kind {
            SourceTypeKind::Enum => {
                let Some(oid) = self.new.oid(c) else { return Ok(None) };
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
                let Some(s) = self.new.text(c) else { return Ok(None) };
                std::str::from_utf8(s).ok().and_then(SourceType::parse).map(Some).ok_or_else(|| {
                    MxError::bad_argument(format!("unknown source_type \"{}\"", String::from_utf8_lossy(s)))
                        .hint("Use one of: decision, fact, preference, tool_result.")
                })
            }
        }
    }

    pub fn org(&self) -> Option<&str> {
        std::str::from_utf8(self.new.text(self.org.as_ref()?)?).ok()
    }

    /// The least and the most restrictive valid tiers held by the target columns of the new
    /// (`old == false`) or old row, None when no target holds one. The least catches a direct
    /// downgrade of one target while another still holds the old tier.
    pub fn tiers(&self, old: bool) -> Result<Option<(Tier, Tier)>, MxError> {
        let row = if old { &self.old } else { &self.new };
        let mut range: Option<(Tier, Tier)> = None;
        for (c, kind) in &self.targets {
            if row.get(c).is_none() {
                continue;
            }
            let tier = match kind {
                TargetKind::Enum(oids) => row.oid(c).and_then(|oid| oids.iter().position(|o| *o == oid)).map(|i| Tier::ALL[i]),
                TargetKind::Text => row.text(c).map(|b| parse_tier(b, &c.name)).transpose()?,
                TargetKind::Jsonb => {
                    if row.jsonb_is_object(c) != Some(true) {
                        return Err(MxError::bad_argument(format!("column \"{}\" must hold a JSON object to receive \"classification\"", c.name)));
                    }
                    row.jsonb_field_text(c, "classification").map(|b| parse_tier(b, &c.name)).transpose()?
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
        cols.into_iter().flatten().any(|c| !self.old.same_as(&self.new, c))
    }

    /// The row to store, with every target column holding `tier`.
    pub fn store(&mut self, row: &RowTrigger, tier: Tier) -> PgHeapTuple<'static, AllocatedByPostgres> {
        let stamped = std::mem::take(&mut self.stamped) || std::mem::take(&mut self.touched);
        // The one change, when it is an enum target at the end of the row that was NULL.
        let (mut n_changed, mut appended) = (0, None);
        for (c, kind) in &self.targets {
            let want = tier.as_str();
            match kind {
                TargetKind::Enum(oids) => {
                    let label = oids[tier as usize];
                    let cur = self.new.oid(c);
                    if cur == Some(label) {
                        continue;
                    }
                    if cur.is_none() && c.idx + 1 == self.natts {
                        appended = Some(pg_sys::Datum::from(label));
                    }
                    self.new.set(c, pg_sys::Datum::from(label));
                }
                TargetKind::Text => {
                    if self.new.text(c) == Some(want.as_bytes()) {
                        continue;
                    }
                    self.new.set_text(c, want);
                }
                TargetKind::Jsonb => {
                    if self.new.jsonb_field_text(c, "classification") == Some(want.as_bytes()) {
                        continue;
                    }
                    self.new.jsonb_merge(c, serde_json::json!({ "classification": want }));
                }
            }
            n_changed += 1;
        }
        let appended = if stamped || n_changed != 1 { None } else { appended };
        row.result(&mut self.new, stamped || n_changed > 0, appended)
    }
}

