//! Retention stamps of a governed row, set by the classify trigger once it knows the row's tier
//! (docs/design.md#retention): the stamp columns of its mapping and the arithmetic of `memory_core::retention`
//! over the policies this module caches.

use crate::errors::MxError;
use crate::pg::tuple::{Column, Deformed, RowTrigger};
use memory_core::classify::Tier;
use memory_core::protocol::{column_type_message, StampArgs};
use pgrx::prelude::*;

/// How the memory-type column holds its label.
#[derive(Clone, Copy)]
enum LabelKind {
    Enum,
    Text,
}

/// Retention stamp columns (all timestamptz) and the optional memory-type column.
pub struct StampColumns {
    created: Column,
    expires: Column,
    purge: Column,
    archive: Column,
    memory_type: Option<(Column, LabelKind)>,
    /// Memory-type enum labels seen (label OID -> label).
    labels: Vec<(pg_sys::Oid, String)>,
}

impl StampColumns {
    /// The retention stamp columns the arguments name.
    pub fn resolve(row: &RowTrigger, spec: &StampArgs) -> Result<Self, MxError> {
        let ts = |name: &str, role: &str| -> Result<Column, MxError> {
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
                let kind = if crate::pg::varlena::type_is_enum(c.typoid) { LabelKind::Enum } else { LabelKind::Text };
                Some((c, kind))
            }
        };
        Ok(StampColumns {
            created: ts(&spec.created, "created_at")?,
            expires: ts(&spec.expires, "expires_at")?,
            purge: ts(&spec.purge, "purge_after")?,
            archive: ts(&spec.archive, "archive_at")?,
            memory_type,
            labels: Vec::new(),
        })
    }

    /// UPDATE: whether expires_at, purge_after or archive_at moved later than the old row's (or
    /// to NULL, never), and whether created_at moved later. An UPDATE never lengthens retention:
    /// lengthened stamps are computed again, and a later creation time is refused; moving a stamp
    /// earlier (shorter retention) is kept.
    pub fn lengthened(&self, old: &Deformed, new: &Deformed) -> (bool, bool) {
        if old.is_empty() {
            return (false, false);
        }
        let later = |c: &Column| match (old.int(c), new.int(c)) {
            (Some(o), Some(n)) => n > o,
            (Some(_), None) => true,
            _ => false,
        };
        let lengthened = [&self.expires, &self.purge, &self.archive].iter().any(|c| later(c));
        let created_later = match (old.int(&self.created), new.int(&self.created)) {
            (Some(o), Some(n)) => n > o,
            (None, Some(_)) => true,
            _ => false,
        };
        (lengthened, created_later)
    }

    /// Stamp expires_at, purge_after and archive_at of the new row for `tier` in `org`.
    pub fn stamp(&mut self, new: &mut Deformed, org: Option<&str>, tier: Tier) -> Result<(), MxError> {
        let created = new.int(&self.created).unwrap_or_else(crate::pg::xact::xact_start_micros);
        // ±infinity (PostgreSQL's DT_NOBEGIN / DT_NOEND) would stamp times no timestamptz holds.
        if created == i64::MIN || created == i64::MAX {
            return Err(MxError::bad_argument("created_at must be a finite time to stamp retention")
                .hint("Write a real creation time, or leave it to its default."));
        }
        // A creation time ahead of the transaction's would lengthen retention.
        if !memory_core::retention::created_at_allowed(created, crate::pg::xact::xact_start_micros()) {
            return Err(MxError::bad_argument(format!(
                "created_at is more than {} minutes after the transaction time",
                memory_core::retention::MAX_CLOCK_SKEW_US / 60_000_000
            ))
            .hint("Write the time the memory was made (an import may backdate it), or leave it to its default."));
        }
        let (retention, grace) = super::tier_policy(org, tier)?;
        let (ttl, archive) = match self.label(new) {
            Some(l) => super::type_policy(&l)?,
            None => (None, None),
        };
        let s = memory_core::retention::stamps(created, retention, grace, ttl, archive);
        for (col, v) in [(&self.expires, s.expires_at), (&self.purge, s.purge_after), (&self.archive, s.archive_at)] {
            match v {
                Some(t) => new.set(col, pg_sys::Datum::from(t)),
                None => new.set_null(col),
            }
        }
        Ok(())
    }

    /// Lineage's retention ceiling (memory_core::lineage::ceiling): expires_at and purge_after of
    /// the new row no later than `expires` and `purge` (the sources' earliest). Whether a stamp moved.
    pub fn cap(&self, new: &mut Deformed, expires: Option<i64>, purge: Option<i64>) -> bool {
        let mut moved = false;
        for (col, bound) in [(&self.expires, expires), (&self.purge, purge)] {
            let cur = new.int(col);
            let want = memory_core::lineage::ceiling(cur, bound);
            if want != cur {
                if let Some(t) = want {
                    new.set(col, pg_sys::Datum::from(t));
                    moved = true;
                }
            }
        }
        moved
    }

    /// The new row's memory type, None for NULL (or no such column).
    fn label(&mut self, new: &Deformed) -> Option<String> {
        let (c, kind) = self.memory_type.as_ref()?;
        match kind {
            LabelKind::Enum => {
                let oid = new.oid(c)?;
                Some(match self.labels.iter().find(|l| l.0 == oid) {
                    Some(l) => l.1.clone(),
                    None => {
                        let (l, _, _) = pgrx::enum_helper::lookup_enum_by_oid(oid);
                        self.labels.push((oid, l.clone()));
                        l
                    }
                })
            }
            LabelKind::Text => new.text(c).map(|b| String::from_utf8_lossy(b).into_owned()),
        }
    }
}
