"""What keeps the memory in shape: compaction, imports, transcripts, aggregation, conflicts, resplit, non-answers, doctor."""
