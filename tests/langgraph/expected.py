"""LangGraph's store tests that fail against memory_ext's stores (SPEC §16), each with why;
docs/python.md lists the same. Keys: "file::test" (every parametrisation) or "file::test[params]"
(that one). Values: the reason, or (reason, strict): strict (the default) reports a test that
starts passing; an open bug whose failure depends on ties would not be strict."""

STORE_TABLE = ("reads and writes PostgresStore's own table `store` through its private _cursor() "
               "(backdates expires_at/updated_at); memory_ext's items are rows of memory.observations, "
               "whose expiry the same rules cover in tests/python/test_items.py")

EXPECTED: dict[str, str | tuple[str, bool]] = {
    "test_store.py::test_scores": "scores are hybrid relevance x weight (reciprocal rank fusion of the lexical and the "
                                  "vector list, SPEC §16), not the raw cosine / inner product / L2 similarity",
    "test_store.py::test_omit_expired_filters_read_paths": STORE_TABLE,
    "test_store.py::test_omit_expired_disabled_preserves_expired_rows": STORE_TABLE,
    "test_store.py::test_omit_expired_refresh_ttl_only_refreshes_live_rows": STORE_TABLE,
    "test_store.py::test_omit_expired_search_pagination": STORE_TABLE,
    "test_async_store.py::test_omit_expired_filters_read_paths": STORE_TABLE,
    "test_async_store.py::test_omit_expired_disabled_preserves_expired_rows": STORE_TABLE,
    "test_async_store.py::test_omit_expired_refresh_ttl_only_refreshes_live_rows": STORE_TABLE,
    "test_async_store.py::test_omit_expired_search_pagination": STORE_TABLE,
    "test_async_store.py::test_abatch_uses_single_pool_checkout": "counts pool checkouts through "
        "langgraph.checkpoint.postgres._ainternal, PostgresStore's private helper, which memory_ext does not use",
    "test_async_store.py::test_vector_search_edge_cases": "compares a score with the score of a perfect match: with "
        "hybrid relevance (ranks fused, SPEC §16) the best item of a one-item result scores the same for any query",
}
