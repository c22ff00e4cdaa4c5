"""The package's version (one place: the package, the cache's version record)."""

__version__ = "0.1.0"
