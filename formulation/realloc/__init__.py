"""In-iteration GPU reallocation (DynaRL): donors, candidates, max-min throughput with migration
cost, migration kinds, and the multi-turn request priority policy of the rollout router."""
