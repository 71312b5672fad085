"""Evaluation of runs: scores (conformance, accuracy, confidence calibration, efficiency),
MaskBench grammar verdicts, content hashes for reproducibility checks, and the report.

``python -m fucina_jobs eval conf=NAME`` runs or reads a job and scores it;
``python -m fucina_jobs compare RUN_A RUN_B`` tells whether two runs output the same
(``review`` and Label Studio's round trip are in ``fucina_jobs.review``).
"""
