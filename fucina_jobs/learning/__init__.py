"""Cues learned from a user's gold rows: the ``x-grounded`` options a schema's documents support (``learn``)."""
