"""Grounded fields: values a record may only take from its row's source text.

``options`` is the table of ``x-grounded`` options (``old_spellings`` reads their former names),
``declaration`` reads the keyword from a JSON schema into typed ``Grounded`` fields, ``values`` reads
the numbers and dates a text writes, ``candidates`` what a field's options leave in a text (the public
API ``learn`` scores options with), ``grammar`` writes those candidates as the per-row Lark grammar that
makes other values impossible, ``check`` verifies records after decoding, ``alarm`` measures a whole run
for made-up output, and ``learned_file`` reads the cues ``learn`` found in gold rows and merges them into
a schema. ``paths`` walks a record, or a schema, by field paths (``("parties", "[]", "name")``).
"""
