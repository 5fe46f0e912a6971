"""Adapters: planner plan bodies to the executor's target, and engines the executor drives
(SGLang over HTTP, Megatron-core sharded state) as optional extras."""
