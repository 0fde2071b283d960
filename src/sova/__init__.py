"""Sova: an autonomic SR-IOV VF and bandwidth allocator for KVM/libvirt clusters."""

# The version is the git tag the build came from (setuptools-scm writes _version.py when
# the package is built or installed). A source tree on PYTHONPATH that was never built
# says so rather than claiming a release.
try:
    from sova._version import __version__
except ImportError:  # pragma: no cover - a source tree that was never built
    from importlib.metadata import PackageNotFoundError, version

    try:
        __version__ = version("sova-sriov")
    except PackageNotFoundError:
        __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
