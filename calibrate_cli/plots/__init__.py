"""Reliability diagrams and the other pictures (matplotlib, Agg backend): :mod:`.diagram`."""
