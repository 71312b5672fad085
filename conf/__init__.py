"""The package's own Hydra configs, ``pkg://fucina_jobs.conf``: ``base``, which every job lists first, and the shipped jobs."""
