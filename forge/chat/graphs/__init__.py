"""Multi-step flows that end in one answer (the recall graph)."""
