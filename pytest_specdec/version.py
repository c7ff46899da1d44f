"""The installed plugin's version, which reports and fingerprints record."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytest-specdec")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
