"""The one version string of ust (read by hatchling for the package metadata)."""

__version__ = "0.1.0"
