"""The run's record: the events, the append-only log they are written to, the one fold
that turns them into the run's state, and what is read from that state (summaries,
standings). Knows nothing of how a run is scheduled."""
