"""The package version, in one place low in the tree (the root re-exports it; the commit
layer records it as the manifest's writer version)."""

__version__ = "0.1.0"
