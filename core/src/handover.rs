//! Read events handed over outside the reader's transaction (docs/audit.md#read-events): the
//! record a backend keeps of each read event it appended (`memory.recall`,
//! `memory.retrieval.hybrid`, `memory.export`), so that when the reading transaction or
//! savepoint rolls back, the same event (same fields) can be handed to shared memory and
//! appended by an integrator in a transaction of its own. Pure byte layout, no I/O.

/// The event types that are read events: the reader's rollback does not remove them.
pub const READ_EVENTS: &[&str] = &[crate::events::RECALL, crate::events::RETRIEVAL_HYBRID, crate::events::EXPORT];

/// Whether `event_type` is a read event.
pub fn is_read_event(event_type: &str) -> bool {
    READ_EVENTS.contains(&event_type)
}

/// One read event, with every field the chain records of it but `recorded_at` (the time of
/// integration, as for every entry) and `seq`/`prev_hash` (the chain's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadEvent {
    pub event_type: String,
    pub org_id: Option<String>,
    pub project_id: Option<String>,
    /// As the reader's appender recorded it (`role:<name>` or `h:<pseudonym>;role:<name>`).
    pub actor_id: Option<String>,
    /// The payload's JSON text (a JSON object: ids, counts, hashes; never content).
    pub payload: String,
}

const NONE: u32 = u32::MAX;

fn put(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(s) => {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        None => out.extend_from_slice(&NONE.to_le_bytes()),
    }
}

fn get(bytes: &[u8], at: &mut usize) -> Result<Option<String>, ()> {
    let len = bytes.get(*at..*at + 4).ok_or(())?;
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
    *at += 4;
    if len == NONE {
        return Ok(None);
    }
    let end = at.checked_add(len as usize).ok_or(())?;
    let s = std::str::from_utf8(bytes.get(*at..end).ok_or(())?).map_err(|_| ())?;
    *at = end;
    Ok(Some(s.to_string()))
}

impl ReadEvent {
    /// The record as bytes: each field as a little-endian u32 length (u32::MAX: absent) and its
    /// UTF-8 bytes, in the order event_type, org_id, project_id, actor_id, payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + self.event_type.len() + self.payload.len() + 64);
        put(&mut out, Some(&self.event_type));
        put(&mut out, self.org_id.as_deref());
        put(&mut out, self.project_id.as_deref());
        put(&mut out, self.actor_id.as_deref());
        put(&mut out, Some(&self.payload));
        out
    }

    /// The record `encode` made; None for anything else (truncated, trailing bytes, not UTF-8,
    /// no event type or payload).
    pub fn decode(bytes: &[u8]) -> Option<ReadEvent> {
        let mut at = 0;
        let mut field = || get(bytes, &mut at);
        let event_type = field().ok()??;
        let org_id = field().ok()?;
        let project_id = field().ok()?;
        let actor_id = field().ok()?;
        let payload = field().ok()??;
        (at == bytes.len()).then_some(ReadEvent { event_type, org_id, project_id, actor_id, payload })
    }

    /// The chain the event belongs to: its org, or `""` (the platform chain).
    pub fn chain(&self) -> &str {
        self.org_id.as_deref().unwrap_or("")
    }
}

/// How many slots of `slot_bytes` a record of `len` bytes takes (at least one).
pub fn slots_for(len: usize, slot_bytes: usize) -> usize {
    len.div_ceil(slot_bytes.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev() -> ReadEvent {
        ReadEvent {
            event_type: "memory.recall".into(),
            org_id: Some("acme".into()),
            project_id: None,
            actor_id: Some("role:reader".into()),
            payload: r#"{"ids":[],"count":0,"k":10}"#.into(),
        }
    }

    #[test]
    fn round_trip_and_rejects() {
        let e = ev();
        let b = e.encode();
        assert_eq!(ReadEvent::decode(&b), Some(e.clone()));
        assert_eq!(e.chain(), "acme");
        assert_eq!(ReadEvent::decode(&b[..b.len() - 1]), None);
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(ReadEvent::decode(&longer), None);
        assert_eq!(ReadEvent::decode(&[]), None);
        // No event type: not a record.
        let mut none = Vec::new();
        put(&mut none, None);
        assert_eq!(ReadEvent::decode(&none), None);
    }

    #[test]
    fn read_events_and_slots() {
        assert!(READ_EVENTS.iter().all(|e| crate::events::ALL.contains(e)));
        assert!(is_read_event("memory.recall") && is_read_event("memory.retrieval.hybrid") && is_read_event("memory.export"));
        assert!(!is_read_event("memory.store") && !is_read_event(" memory.recall"));
        assert_eq!((slots_for(0, 1024), slots_for(1024, 1024), slots_for(1025, 1024)), (1, 1, 2));
    }

    proptest! {
        #[test]
        fn any_record_round_trips(t in "[a-z.]{1,30}", o in proptest::option::of(".{0,40}"), p in proptest::option::of(".{0,40}"),
                                  a in proptest::option::of(".{0,40}"), body in ".{0,200}") {
            let e = ReadEvent { event_type: t, org_id: o, project_id: p, actor_id: a, payload: body };
            prop_assert_eq!(ReadEvent::decode(&e.encode()), Some(e));
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ReadEvent::decode(&bytes);
        }
    }
}
