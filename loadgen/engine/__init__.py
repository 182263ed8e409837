"""The engine that runs a shard: the plan it executes (`plan`), the runner and its state
(`runner`, `shard`), levels and the saturation search (`levels`, `search`), when and what
is sent (`schedule`, `loadmodels`, `workload`), the event->record fold (`fold`), the
self-check (`health`), where shards meet (`pool`) and the event loop (`runtime`)."""
