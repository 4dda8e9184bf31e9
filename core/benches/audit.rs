//! Throughput of audit chaining and verification on small object payloads like the extension's.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use memory_core::audit::{
    merkle_root, pseudonymize, sha256_hex, verify_entries, Chainer, Event, StoredEntry, Verifier, ZERO_HASH,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

const N: usize = 10_000;
const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

fn payloads() -> Vec<Value> {
    (0..N)
        .map(|i| {
            let op = ["write", "read", "update"][i % 3];
            json!({
                "memory_id": 1_000_000 + i,
                "op": op,
                "tier": "internal",
                "content_sha256": sha256_hex(&i.to_le_bytes()),
                "actor": pseudonymize(b"salt", &format!("user-{}", i % 17)),
            })
        })
        .collect()
}

fn event(i: usize, payload: &Value) -> Event<'_> {
    Event {
        chain_id: "tenant-0001",
        seq: 0,
        prev_hash: ZERO_HASH,
        event_type: "memory.write",
        recorded_at_micros: 1_700_000_000_000_000 + i as i64 * 250,
        actor_id: Some("h:6f1ed002ab5595859014ebf0951522d9"),
        org_id: Some("org-1"),
        project_id: Some("proj-7"),
        workspace_id: None,
        key_id: 1,
        payload: payload.into(),
    }
}

fn bench(c: &mut Criterion) {
    let payloads = payloads();
    let mut chainer = Chainer::new(0, ZERO_HASH);
    let rows: Vec<StoredEntry> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut ev = event(i, p);
            let (_, _, hash) = chainer.append(KEY, &mut ev);
            StoredEntry::from_event(&ev, hash)
        })
        .collect();
    let head = Some(chainer.head());
    let keys = HashMap::from([(1, KEY.to_vec())]);
    assert!(verify_entries(&keys, Vec::new(), &rows, head).ok);
    let hashes: Vec<[u8; 32]> = rows.iter().map(|e| e.entry_hash.as_slice().try_into().expect("32 bytes")).collect();

    let mut g = c.benchmark_group("audit");
    g.measurement_time(Duration::from_secs(3)).sample_size(10).throughput(Throughput::Elements(N as u64));
    g.bench_function("chain_10k", |b| {
        b.iter(|| {
            let mut chainer = Chainer::new(0, ZERO_HASH);
            for (i, p) in payloads.iter().enumerate() {
                let mut ev = event(i, p);
                black_box(chainer.append(KEY, &mut ev));
            }
            chainer.head()
        })
    });
    g.bench_function("verify_10k", |b| {
        b.iter(|| {
            let mut v = Verifier::new(&keys, Vec::new());
            for e in &rows {
                v.push(black_box(e));
            }
            v.finish(head)
        })
    });
    g.bench_function("merkle_10k", |b| b.iter(|| merkle_root(black_box(&hashes))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
