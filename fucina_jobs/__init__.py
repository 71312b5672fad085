"""fucina_jobs: declarative batch jobs for structured extraction with LLMs."""

import os

# OpenMP's default spin-waiting makes a 2-thread CPU forward many times slower
# as soon as anything else runs; passive waiting costs nothing when idle.
# It must be set before torch loads its OpenMP runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
