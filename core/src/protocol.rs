//! The trigger-argument protocol: what `memory.govern` writes into TG_ARGV of the triggers it
//! attaches, and what the triggers read back. One owner for both directions: `govern` builds the
//! arguments with `to_args` (through `memory_internal._classify_trigger_args` / `_audit_trigger_args`),
//! the triggers parse them with `parse`, and the property tests below check the round trip.
//!
//! - classify trigger: `content, source_files|'', source_type|'', target` then optional
//!   `org=<col>`, more `target=<col>`, `stamps=created,expires,purge,archive,memory_type|''`, and
//!   `content_required` (a blank content is refused);
//! - audit trigger: `key=value` pairs (`id`, `content`, `org`, `project`, `workspace`, `user`,
//!   `tier`, `tier_json=true`; a `table=` pair is accepted and ignored: events name the table the
//!   trigger fired on).

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProtocolError {
    #[error("memory.classify_trigger needs 4 arguments (content, source_files, source_type, target), got {0}")]
    TooFewArguments(usize),
    #[error("unknown {trigger} argument \"{arg}\"")]
    Unknown { trigger: &'static str, arg: String },
    #[error("bad stamps argument \"{0}\"")]
    BadStamps(String),
}

/// Retention stamp columns of a classify trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StampArgs {
    pub created: String,
    pub expires: String,
    pub purge: String,
    pub archive: String,
    pub memory_type: Option<String>,
}

/// The column mapping of `memory.classify_trigger`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifyArgs {
    pub content: String,
    pub source_files: Option<String>,
    pub source_type: Option<String>,
    /// At least one.
    pub targets: Vec<String>,
    pub org: Option<String>,
    pub stamps: Option<StampArgs>,
    /// A blank content (empty or white space only) is refused (22023).
    pub content_required: bool,
}

impl ClassifyArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            self.content.clone(),
            self.source_files.clone().unwrap_or_default(),
            self.source_type.clone().unwrap_or_default(),
            self.targets.first().cloned().unwrap_or_default(),
        ];
        if let Some(o) = &self.org {
            a.push(format!("org={o}"));
        }
        for t in self.targets.iter().skip(1) {
            a.push(format!("target={t}"));
        }
        if let Some(s) = &self.stamps {
            a.push(format!(
                "stamps={},{},{},{},{}",
                s.created,
                s.expires,
                s.purge,
                s.archive,
                s.memory_type.as_deref().unwrap_or("")
            ));
        }
        if self.content_required {
            a.push("content_required".into());
        }
        a
    }

    pub fn parse(args: &[String]) -> Result<Self, ProtocolError> {
        if args.len() < 4 {
            return Err(ProtocolError::TooFewArguments(args.len()));
        }
        let opt = |s: &String| (!s.is_empty()).then(|| s.clone());
        let mut out = ClassifyArgs {
            content: args[0].clone(),
            source_files: opt(&args[1]),
            source_type: opt(&args[2]),
            targets: vec![args[3].clone()],
            org: None,
            stamps: None,
            content_required: false,
        };
        for extra in &args[4..] {
            if let Some(spec) = extra.strip_prefix("stamps=") {
                let n: Vec<&str> = spec.split(',').collect();
                if n.len() != 5 || n[..4].iter().any(|c| c.is_empty()) {
                    return Err(ProtocolError::BadStamps(spec.to_string()));
                }
                out.stamps = Some(StampArgs {
                    created: n[0].into(),
                    expires: n[1].into(),
                    purge: n[2].into(),
                    archive: n[3].into(),
                    memory_type: (!n[4].is_empty()).then(|| n[4].to_string()),
                });
            } else if let Some(c) = extra.strip_prefix("org=") {
                out.org = Some(c.to_string());
            } else if let Some(c) = extra.strip_prefix("target=") {
                out.targets.push(c.to_string());
            } else if extra == "content_required" {
                out.content_required = true;
            } else {
                return Err(ProtocolError::Unknown { trigger: "memory.classify_trigger", arg: extra.clone() });
            }
        }
        Ok(out)
    }
}

/// The column mapping of `memory.audit_trigger`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditArgs {
    pub id: Option<String>,
    pub content: Option<String>,
    pub org: Option<String>,
    pub project: Option<String>,
    pub workspace: Option<String>,
    pub user: Option<String>,
    pub tier: Option<String>,
    /// The tier column is jsonb (key `classification`).
    pub tier_json: bool,
}

impl AuditArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        for (k, v) in [
            ("id", &self.id),
            ("content", &self.content),
            ("org", &self.org),
            ("project", &self.project),
            ("workspace", &self.workspace),
            ("user", &self.user),
            ("tier", &self.tier),
        ] {
            if let Some(v) = v {
                a.push(format!("{k}={v}"));
            }
        }
        if self.tier_json {
            a.push("tier_json=true".into());
        }
        a
    }

    pub fn parse(args: &[String]) -> Result<Self, ProtocolError> {
        let mut m = AuditArgs::default();
        for a in args {
            let (k, v) = a.split_once('=').ok_or_else(|| ProtocolError::Unknown { trigger: "memory.audit_trigger", arg: a.clone() })?;
            let v = Some(v.to_string());
            match k {
                "table" => {}
                "id" => m.id = v,
                "content" => m.content = v,
                "org" => m.org = v,
                "project" => m.project = v,
                "workspace" => m.workspace = v,
                "user" => m.user = v,
                "tier" => m.tier = v,
                "tier_json" => m.tier_json = v.as_deref() == Some("true"),
                _ => return Err(ProtocolError::Unknown { trigger: "memory.audit_trigger", arg: a.clone() }),
            }
        }
        Ok(m)
    }
}

/// What a mapped column must be, by the role it plays (checked by `memory.govern` when it attaches
/// a trigger and by the trigger when it fires, with this one message).
pub fn expected_type(role: &str) -> &'static str {
    match role {
        "content" => "text or varchar",
        "source_files" => "text[] or varchar[]",
        "source_type" => "memory.source_type or text",
        "org" => "text or varchar",
        "target" => "memory.classification, text or jsonb",
        "created_at" | "expires_at" | "purge_after" | "archive_at" | "soft_deleted_at" => "timestamptz",
        "memory_type" => "memory.memory_type or text",
        "weight" => "double precision",
        "id" => "uuid",
        "derived_from" => "uuid[]",
        "state" => "memory.lifecycle_state or text",
        _ => "of another type",
    }
}

/// The message for a mapped column of the wrong type.
pub fn column_type_message(role: &str, column: &str, table: &str) -> String {
    format!("the {role} column \"{column}\" of {table} must be {}", expected_type(role))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Column names: anything PostgreSQL allows except the characters the protocol uses.
    fn col() -> impl Strategy<Value = String> {
        "[a-zA-Z_][a-zA-Z0-9_ $é]{0,20}"
    }

    proptest! {
        #[test]
        fn classify_args_round_trip(content in col(), files in proptest::option::of(col()), st in proptest::option::of(col()),
                                    targets in proptest::collection::vec(col(), 1..4), org in proptest::option::of(col()),
                                    stamps in proptest::option::of((col(), col(), col(), col(), proptest::option::of(col()))),
                                    content_required: bool) {
            let a = ClassifyArgs {
                content, source_files: files, source_type: st, targets, org,
                stamps: stamps.map(|(c, e, p, a, m)| StampArgs { created: c, expires: e, purge: p, archive: a, memory_type: m }),
                content_required,
            };
            prop_assert_eq!(ClassifyArgs::parse(&a.to_args()), Ok(a));
        }

        #[test]
        fn audit_args_round_trip(id in proptest::option::of(col()), content in proptest::option::of(col()), org in proptest::option::of(col()),
                                 project in proptest::option::of(col()), workspace in proptest::option::of(col()),
                                 user in proptest::option::of(col()), tier in proptest::option::of(col()), tier_json: bool) {
            let a = AuditArgs { id, content, org, project, workspace, user, tier, tier_json };
            prop_assert_eq!(AuditArgs::parse(&a.to_args()), Ok(a));
        }
    }

    #[test]
    fn type_messages_name_role_column_table_and_type() {
        assert_eq!(column_type_message("content", "body", "public.t"), "the content column \"body\" of public.t must be text or varchar");
        assert_eq!(expected_type("expires_at"), "timestamptz");
        assert_eq!(expected_type("derived_from"), "uuid[]");
    }

    #[test]
    fn malformed_arguments_are_named() {
        assert_eq!(ClassifyArgs::parse(&["a".into()]), Err(ProtocolError::TooFewArguments(1)));
        let base: Vec<String> = ["c", "", "", "t"].iter().map(|s| s.to_string()).collect();
        let mut bad = base.clone();
        bad.push("colour=red".into());
        assert!(matches!(ClassifyArgs::parse(&bad), Err(ProtocolError::Unknown { .. })));
        let mut stamps = base.clone();
        stamps.push("stamps=a,b".into());
        assert_eq!(ClassifyArgs::parse(&stamps), Err(ProtocolError::BadStamps("a,b".into())));
        assert!(AuditArgs::parse(&["noequals".into()]).is_err());
        assert_eq!(AuditArgs::parse(&["table=x".into(), "id=id".into()]).map(|a| a.id), Ok(Some("id".into())));
    }
}
