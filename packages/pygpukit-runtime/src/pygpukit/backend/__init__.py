"""Backends: ``select`` picks one lazily; ``cuda`` (over ``_native``) and ``cpu`` (NumPy).

``base`` spells out the protocol both implement.
"""
