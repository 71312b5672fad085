"""``python -m fucina_jobs bench``: benchmarks of the decoder, the engines, the data path and whole jobs.

Each subcommand prints aligned text tables (or ``--json``):

- ``decode`` (decode.py): one stream, greedy, four arms per document: plain
  unconstrained, plain constrained, speculative without and with grammar
  drafting; forwards, acceptance, byte identity, where the time goes and the
  logit processor's time per token;
- ``streams`` (streams.py): aggregate throughput for several stream counts,
  speculation off and on, over documents cycled under distinct ids;
- ``engines`` (engines.py): fucina against vLLM and transformers ``generate``,
  each engine in a worker process of its own;
- ``pipeline``, ``occupancy``, ``reports`` (their modules): the data path on
  the canned engine, streams kept busy across shards, long documents;
- ``job`` (job.py): arms of one job config, each a whole run, with accuracy
  where the job names gold labels.

The machine is assumed to be shared, so every table compares arms measured
side by side in one run: the arms alternate, in an order rotated every round
(arms.alternate, the one timed loop), and wall times are medians over
``--repeats``. OpenMP's passive waiting is set by the package's ``__init__``,
before torch loads.
"""
