"""tfring's version: the one place it is written (setup.py reads this file without importing tfring)."""
__version__ = "0.1.0"
