"""Grounded fields: values a record may only take from its row's source text.

``declaration`` reads the ``x-grounded`` keyword from a JSON schema, ``values``
reads the numbers and dates a text writes, ``grammar`` builds the per-row Lark
grammar that makes other values impossible, ``check`` verifies records after
decoding, ``alarm`` measures a whole run for made-up output, and ``learned_file``
reads the cues ``learn`` found in gold rows and merges them into a schema. ``paths``
walks a record, or a schema, by field paths (``("parties", "[]", "name")``).
"""
