//! Throughput of the built-in classifier on realistic agent-memory content.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use memory_core::classify::{classify, SourceType};

const SAMPLES: [&str; 6] = [
    "Refactored the retry loop in the payment worker to back off exponentially after timeouts",
    "User prefers concise answers with code first and explanations after",
    "Decision: adopt the SOX change-management policy for the release pipeline",
    "The build failed because the cache key did not include the lockfile hash",
    "Rotated the API key used by the staging deploy job",
    "Customer called about card 4111 1111 1111 1111 being declined",
];

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify");
    g.throughput(Throughput::Elements(SAMPLES.len() as u64));
    g.bench_function("mixed_samples", |b| {
        b.iter(|| {
            for (i, s) in SAMPLES.iter().enumerate() {
                let paths: &[&str] = if i % 2 == 0 { &["src/worker/retry.rs"] } else { &[] };
                black_box(classify(black_box(s.as_bytes()), paths, Some(SourceType::Decision), true));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
