//! Throughput of the built-in classifier on realistic agent-memory content.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use memory_core::classify::{classify, DetectorSet, SourceType};

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
                black_box(classify(black_box(s.as_bytes()), paths, Some(SourceType::Decision), DetectorSet::all()));
            }
        })
    });
    // The rows of bench/classify_bench.py (its ten templates with their numbers filled in).
    let rows: Vec<(String, Vec<String>)> = (1..=1000u64)
        .map(|g| {
            let n = (g * 7919) % 100000;
            let t = match g % 10 {
                0 => format!("Refactored the retry loop in job {g} so the worker backs off after {n} timeouts"),
                1 => format!("User prefers concise answers with code first; session {g}, turn {n}"),
                2 => format!("Decision {g}: adopt the SOX change-management policy for release {n}"),
                3 => format!("Build {g} failed because the cache key did not include lockfile hash {n}"),
                4 => format!("Rotated the API_KEY used by deploy job {g} after incident {n}"),
                5 => format!("Tool result {g}: query returned {n} rows from the orders table in 42 ms"),
                6 => format!("Customer {g} asked to update the billing address on invoice {n}"),
                7 => format!("The flaky test {g} was fixed by pinning the clock; attempt {n}"),
                8 => format!("Support ticket {g} mentions a credit card dispute, case {n}"),
                _ => format!("Meeting notes {g}: agreed to ship the search feature in sprint {n}"),
            };
            let paths = match g % 4 {
                0 => vec![],
                1 => vec![format!("docs/guide/{g}.md")],
                2 => vec!["src/worker/retry.rs".to_string(), format!("src/api/handler_{}.ts", g % 50)],
                _ => vec!["public/docs/index.md".to_string(), "docs/faq.md".to_string()],
            };
            (t, paths)
        })
        .collect();
    let rows: Vec<(&str, Vec<&str>)> = rows.iter().map(|(t, ps)| (t.as_str(), ps.iter().map(String::as_str).collect())).collect();
    g.throughput(Throughput::Elements(rows.len() as u64));
    for (name, set) in [("bench_rows_first_generation", DetectorSet::first_generation()), ("bench_rows_all_detectors", DetectorSet::all())] {
        g.bench_function(name, |b| {
            b.iter(|| {
                for (i, (t, ps)) in rows.iter().enumerate() {
                    let st = [SourceType::Decision, SourceType::Fact, SourceType::Preference, SourceType::ToolResult][i % 4];
                    black_box(classify(black_box(t.as_bytes()), ps, Some(st), set));
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
