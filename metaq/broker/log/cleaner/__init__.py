"""The log cleaner: compaction of ``cleanup.policy=compact`` logs, with Kafka's semantics (docs/compaction.md).

Modules: :mod:`.config` (broker settings), :mod:`.offset_map` (the bounded key -> offset map),
:mod:`.rewrite` (filtering one batch), :mod:`.cleaner` (cleaning one log), :mod:`.swap` (crash-safe segment
replacement and its recovery at start), :mod:`.manager` (cleaner threads, the dirtiest log first, the
``cleaner-offset-checkpoint``)."""
