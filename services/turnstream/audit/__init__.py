"""audit service: projections into ts_sessions, invariant checks, a hash-chained audit file."""
