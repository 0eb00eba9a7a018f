"""Spark jobs over a replica's CommitLog."""
