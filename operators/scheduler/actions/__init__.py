"""Actions run in order each session: enqueue, allocate, preempt, reclaim, backfill."""
