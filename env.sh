# source me: helper h-newuser's private PostgreSQL 15 tree, pgrx home, cluster names
export PATH="$HOME/.cargo/bin:$PATH"
export PG_CONFIG=/work/pgtrees/h-newuser/usr/lib/postgresql/15/bin/pg_config
export PGRX_HOME=/work/pgrx-h-newuser
export PGRX_TEST_DATA=/tmp/memory_ext-h-newuser-pgrx-test
export MEMORY_EXT_CLUSTER_PREFIX=h-newuser-
export PG18_CONFIG=/nonexistent-use-the-lead-for-pg18
cd /work/wt-h-newuser
