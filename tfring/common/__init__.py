"""tfring's framework-free layer: the core library's loader and C API, init/shutdown and topology, process sets,
the reduce ops, errors, the compression interface, the signed channel, the launcher<->rank contract and the elastic
machinery. It imports no framework and no other tfring package; every binding builds on it (docs/architecture.md,
Layers)."""
