"""Trace-replay scenarios from measured per-VM series (docs/operations.md#replay-your-cluster).

Three sources turn into one shape (:class:`~sova.traces.replay.VMSeries`) and one writer
(:func:`~sova.traces.replay.write_replay`): the per-VM files public trace archives publish
(:mod:`sova.traces.archive`) and an operator's own Prometheus
(:mod:`sova.traces.prometheus`). The result is a scenario YAML and its CSV that
``sova validate`` accepts and ``sova simulate`` replays.
"""
