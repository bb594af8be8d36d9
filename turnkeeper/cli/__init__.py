"""The ``turnkeeper`` command line: a thin shell over ``runtime`` and ``kernel``."""
