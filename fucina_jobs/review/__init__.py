"""Review: a person checks a run's values, and what they accept comes back as gold labels.

``cli`` is ``review RUN_DIR`` (the least certain values first) and, with ``--html``, ``page``'s
self-contained page; ``labelstudio`` exports a run as Label Studio tasks and imports the
annotations as gold lines; ``browser`` drives headless Chromium for the page's tests and benchmark.
"""
