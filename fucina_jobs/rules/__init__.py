"""Cross-field rules: what a record must keep beyond its schema, such as ``subtotal + tax == total``.

``expression`` parses and evaluates the rule language safely, ``declaration``
reads the ``x-rules`` keyword from a JSON schema, and ``repair`` plans which
grounded values a record that breaks a rule has excluded at its next decode.
docs/RULES.md describes them.
"""
