"""The package version, in a module of its own so that no layer imports the package facade for it."""

__version__ = "0.1.0"
