# Intentionally empty: its presence (with no tests/__init__.py) makes pytest's default "prepend"
# import mode put tests/ on sys.path, so test modules can `from naive_reference import ...`.
