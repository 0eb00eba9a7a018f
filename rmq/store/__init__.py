"""The storage engine: CommitLog, ConsumeQueue, IndexFile; knows nothing of the network."""
