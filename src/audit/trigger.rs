//! The statement-level trigger of governed tables: one event per affected row, chained per
//! tenant through the shared `Appender`.

use super::{chain_of, default_actor, spi_err, Appender, Pending, CHUNK};
use crate::errors::{MxError, OrRaise};
use memory_core::audit::sha256_hex;
use pgrx::prelude::*;
use pgrx::spi::quote_identifier;
use serde_json::json;
use std::borrow::Cow;
use std::collections::HashMap;

/// Column mapping of `memory.audit_trigger`, from TG_ARGV `key=value` pairs.
#[derive(Default)]
struct AuditMap {
    table: String,
    id: Option<String>,
    content: Option<String>,
    org: Option<String>,
    project: Option<String>,
    workspace: Option<String>,
    user: Option<String>,
    tier: Option<String>,
    tier_json: bool,
}

impl AuditMap {
    fn parse(args: &[String]) -> Result<Self, MxError> {
        let mut m = AuditMap::default();
        for a in args {
            let (k, v) = a.split_once('=').ok_or_else(|| MxError::new("39P01", format!("bad memory.audit_trigger argument \"{a}\"")))?;
            let v = Some(v.to_string());
            match k {
                "table" => m.table = v.unwrap_or_default(),
                "id" => m.id = v,
                "content" => m.content = v,
                "org" => m.org = v,
                "project" => m.project = v,
                "workspace" => m.workspace = v,
                "user" => m.user = v,
                "tier" => m.tier = v,
                "tier_json" => m.tier_json = v.as_deref() == Some("true"),
                _ => return Err(MxError::new("39P01", format!("unknown memory.audit_trigger argument \"{a}\""))),
            }
        }
        Ok(m)
    }

    fn col(&self, alias: &str, c: &Option<String>) -> String {
        match c {
            Some(c) => format!("{alias}.{}::text", quote_identifier(c)),
            None => "NULL::text".into(),
        }
    }

    fn tier_expr(&self, alias: &str) -> String {
        match &self.tier {
            Some(c) if self.tier_json => format!("({alias}.{}->>'classification')", quote_identifier(c)),
            Some(c) => format!("{alias}.{}::text", quote_identifier(c)),
            None => "NULL::text".into(),
        }
    }

    /// id, content, org, project, workspace, user, tier of alias `t`.
    fn select_list(&self, alias: &str) -> String {
        [
            self.col(alias, &self.id),
            self.col(alias, &self.content),
            self.col(alias, &self.org),
            self.col(alias, &self.project),
            self.col(alias, &self.workspace),
            self.col(alias, &self.user),
            self.tier_expr(alias),
        ]
        .join(", ")
    }
}

#[pg_trigger]
fn audit_trigger<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    audit_statement(trigger).or_raise();
    Ok(None)
}

fn audit_statement(trigger: &PgTrigger) -> Result<(), MxError> {
    let td = trigger.trigger_data();
    let map = AuditMap::parse(&trigger.extra_args().unwrap_or_default())?;
    let ev = td.tg_event;
    if ev & pg_sys::TRIGGER_EVENT_ROW != 0 || ev & pg_sys::TRIGGER_EVENT_TIMINGMASK != pg_sys::TRIGGER_EVENT_AFTER {
        return Err(MxError::new("39P01", "memory.audit_trigger must be fired AFTER ... FOR EACH STATEMENT with transition tables")
            .hint("Attach it with memory.govern(table, '{\"audit\": true}')."));
    }
    let op = ev & pg_sys::TRIGGER_EVENT_OPMASK;
    let new_tt = trigger.new_transition_table_name().ok().flatten().map(quote_identifier);
    let old_tt = trigger.old_transition_table_name().ok().flatten().map(quote_identifier);
    let (event_type, query): (&'static str, String) = match (op, new_tt, old_tt) {
        (pg_sys::TRIGGER_EVENT_INSERT, Some(n), _) => ("memory.store", format!("SELECT {} FROM {n} t", map.select_list("t"))),
        (pg_sys::TRIGGER_EVENT_DELETE, _, Some(o)) => ("memory.delete", format!("SELECT {} FROM {o} t", map.select_list("t"))),
        (pg_sys::TRIGGER_EVENT_UPDATE, Some(n), Some(o)) if map.id.is_some() && map.tier.is_some() => {
            let id = quote_identifier(map.id.as_deref().unwrap_or_default());
            (
                "memory.reclassify",
                format!(
                    "SELECT {}, {} FROM {n} t JOIN {o} o ON o.{id} = t.{id} WHERE {} IS DISTINCT FROM {}",
                    map.select_list("t"),
                    map.tier_expr("o"),
                    map.tier_expr("o"),
                    map.tier_expr("t")
                ),
            )
        }
        _ => return Ok(()),
    };
    let reason = crate::classify::downgrade_reason();

    Spi::connect(|client| {
        unsafe { pg_sys::SPI_register_trigger_data(td as *const _ as *mut _) };
        let mut ap = Appender::new(client)?;
        let actor = default_actor(&ap);
        // Pseudonyms of the statement's users: each is an HMAC, and a statement usually writes
        // for few users.
        let mut pseudonyms: HashMap<String, String> = HashMap::new();
        let mut to_events = |batch: pgrx::spi::SpiTupleTable, ap: &Appender| -> Result<Vec<Pending>, MxError> {
            let mut out = Vec::with_capacity(batch.len());
            for row in batch {
                let id: Option<String> = row.get(1).map_err(spi_err)?;
                let content: Option<&str> = row.get(2).map_err(spi_err)?;
                let org: Option<String> = row.get(3).map_err(spi_err)?;
                let project: Option<String> = row.get(4).map_err(spi_err)?;
                let workspace: Option<String> = row.get(5).map_err(spi_err)?;
                let user: Option<&str> = row.get(6).map_err(spi_err)?;
                let tier: Option<String> = row.get(7).map_err(spi_err)?;
                let user_p = user.map(|u| match pseudonyms.get(u) {
                    Some(p) => p.clone(),
                    None => {
                        let p = ap.pseudonym(u);
                        if pseudonyms.len() < 100_000 {
                            pseudonyms.insert(u.to_string(), p.clone());
                        }
                        p
                    }
                });
                let payload = match event_type {
                    "memory.store" => json!({
                        "table": map.table, "id": id, "content_sha256": content.map(|c| sha256_hex(c.as_bytes())),
                        "classification": tier, "userId": user_p,
                    }),
                    "memory.delete" => json!({ "table": map.table, "id": id, "classification": tier, "userId": user_p }),
                    _ => {
                        let old: Option<String> = row.get(8).map_err(spi_err)?;
                        json!({ "table": map.table, "id": id, "from": old, "to": tier, "reason": reason, "userId": user_p })
                    }
                };
                out.push(Pending {
                    event_type: Cow::Borrowed(event_type),
                    org_id: org,
                    project_id: project,
                    workspace_id: workspace,
                    actor_id: Some(actor.clone()),
                    payload,
                    payload_text: None,
                });
            }
            Ok(out)
        };

        let mut cursor = client.open_cursor(query.as_str(), &[]);
        let first = to_events(cursor.fetch(CHUNK as std::ffi::c_long).map_err(spi_err)?, &ap)?;
        if first.is_empty() {
            return Ok(());
        }
        // Lock every chain the statement touches before chaining anything, in order. A statement
        // that fits in one chunk names its chains itself; a bigger one is scanned for them.
        if first.len() < CHUNK {
            let chains: Vec<String> = first.iter().map(|e| chain_of(&e.org_id).to_string()).collect();
            ap.lock(client, chains.iter().map(String::as_str))?;
        } else {
            let orgs_q = format!(
                "SELECT DISTINCT coalesce(org, '') FROM ({query}) q(id, content, org, project, workspace, usr, tier{})",
                if event_type == "memory.reclassify" { ", old_tier" } else { "" }
            );
            let mut chains = Vec::new();
            for row in client.select(orgs_q.as_str(), None, &[]).map_err(spi_err)? {
                chains.push(row.get::<String>(1).map_err(spi_err)?.unwrap_or_default());
            }
            ap.lock(client, chains.iter().map(String::as_str))?;
        }
        ap.reserve(first.len());
        for e in first {
            ap.push(client, e)?;
        }
        loop {
            let batch = cursor.fetch(CHUNK as std::ffi::c_long).map_err(spi_err)?;
            if batch.is_empty() {
                break;
            }
            for e in to_events(batch, &ap)? {
                ap.push(client, e)?;
            }
        }
        ap.finish(client)
    })
}
