"""Master/slave replication of the CommitLog (depends on rmq.store and rmq.remoting)."""
