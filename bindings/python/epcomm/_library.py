# SPDX-License-Identifier: Apache-2.0
"""Finding, loading and calling libepcomm.

The library is loaded on first use (importing epcomm loads nothing), from the first of:
$EPCOMM_LIB (an explicit override), the copy a wheel bundles (epcomm/_lib/), the system's
(its SONAME libepcomm.so.<major> through the dynamic loader's search path).
Loading checks that the library's ABI major equals the one these bindings were generated
for (EPC_ABI_MAJOR in _ffi); a library of the same major but an older minor lacks the
newest functions, and calling one of those raises EpcError(UNSUPPORTED) naming it.
"""

import ctypes
import os
import threading
from typing import Any, NamedTuple, Optional, Tuple

from . import _ffi
from .errors import EpcError, Status, error_for

ENV_LIBRARY = "EPCOMM_LIB"
DEFAULT_LIBRARY = f"libepcomm.so.{_ffi.EPC_ABI_MAJOR}"
BUNDLED_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", DEFAULT_LIBRARY)


def find_library() -> Tuple[str, str]:
    """(path, where) of the library load_library() would load: $EPCOMM_LIB ("EPCOMM_LIB"),
    else the wheel's bundled copy ("bundled"), else the SONAME for the loader ("system")."""
    override = os.environ.get(ENV_LIBRARY)
    if override:
        return override, ENV_LIBRARY
    if os.path.exists(BUNDLED_LIBRARY):
        return BUNDLED_LIBRARY, "bundled"
    return DEFAULT_LIBRARY, "system"


class Version(NamedTuple):
    """An ABI version: major.minor.patch."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


BINDING_VERSION = Version(_ffi.EPC_ABI_MAJOR, _ffi.EPC_ABI_MINOR, _ffi.EPC_ABI_PATCH)


class Library:
    """One loaded libepcomm whose ABI major matches these bindings.

    Thread-safe: it only holds the ctypes handle; every C function it calls documents its
    own thread-safety.
    """

    def __init__(self, path: str, source: str = "path"):
        try:
            cdll = ctypes.CDLL(path)
        except OSError as error:
            raise OSError(
                f"cannot load the epcomm library {path!r} ({error}); set {ENV_LIBRARY} to "
                f"the path of {DEFAULT_LIBRARY} (e.g. build/capi/{DEFAULT_LIBRARY}) or add "
                "its directory to LD_LIBRARY_PATH"
            ) from error
        self.path = path
        self.source = source  # how it was found: "EPCOMM_LIB", "bundled", "system" or "path"
        self.cdll = cdll
        self.missing = frozenset(_ffi.bind(cdll))
        for required in ("epc_get_version", "epc_last_error", "epc_status_string"):
            if required in self.missing:
                raise EpcError(Status.ABI_MISMATCH, f"{path} does not export {required}: it is not an epcomm library")
        self.version = self._read_version()
        if self.version.major != BINDING_VERSION.major:
            raise EpcError(
                Status.ABI_MISMATCH,
                f"{path} has ABI {self.version} but these bindings were generated "
                f"for ABI {BINDING_VERSION}: the major versions must be equal",
            )

    def _read_version(self) -> Version:
        parts = [ctypes.c_uint32() for _ in range(3)]
        status = self.cdll.epc_get_version(*(ctypes.byref(p) for p in parts))
        if status != _ffi.EPC_OK:
            raise EpcError(status, self.last_error(), "epc_get_version")
        return Version(*(p.value for p in parts))

    def function(self, name: str) -> Any:
        """The ctypes function `name`, with the generated prototype applied."""
        if name in self.missing or name not in _ffi.PROTOTYPES:
            raise EpcError(
                Status.UNSUPPORTED,
                f"{name} is not exported by {self.path} (ABI {self.version}); these "
                f"bindings were generated for ABI {BINDING_VERSION}",
            )
        return getattr(self.cdll, name)

    def call(self, name: str, *args: Any) -> None:
        """Call the C function `name`; raise EpcError if it returns a non-zero status.

        The detail message is read with epc_last_error on this same thread immediately
        after the call (ctypes releases the GIL during the call but the OS thread, whose
        thread-local message it is, stays the same)."""
        status = self.function(name)(*args)
        if status != _ffi.EPC_OK:
            raise error_for(status, self.last_error(), name)

    def last_error(self) -> str:
        """The calling thread's last error message ("" after a successful call)."""
        length = ctypes.c_size_t(0)
        self.cdll.epc_last_error(None, 0, ctypes.byref(length))
        buffer = ctypes.create_string_buffer(length.value + 1)
        self.cdll.epc_last_error(buffer, len(buffer), None)
        return buffer.value.decode("utf-8", errors="replace")

    def status_string(self, status: int) -> str:
        text: bytes = self.cdll.epc_status_string(int(status))
        return text.decode("utf-8", errors="replace")


_lock = threading.Lock()
_loaded: Optional[Library] = None


def load_library(path: Optional[str] = None) -> Library:
    """Load libepcomm once per process and return it.

    `path` (else $EPCOMM_LIB, else the wheel's bundled copy, else "libepcomm.so.<major>" for
    the loader's search path) names the library. Later calls
    return the loaded one; asking for a different path after loading raises RuntimeError,
    since two copies of the library in one process would not share their state.
    Thread-safe.
    """
    global _loaded
    with _lock:
        if _loaded is None:
            wanted, source = (path, "path") if path else find_library()
            _loaded = Library(wanted, source)
        elif path is not None and path != _loaded.path:
            raise RuntimeError(f"epcomm is already loaded from {_loaded.path!r}; cannot also load {path!r}")
        return _loaded


def library() -> Library:
    """The process's Library, loading it on first use."""
    return _loaded if _loaded is not None else load_library()


def call(name: str, *args: Any) -> None:
    library().call(name, *args)


def version() -> Version:
    """The ABI version of the loaded library (epc_get_version). Local, thread-safe."""
    return library().version


def status_string(status: int) -> str:
    """The library's static English string for `status` (epc_status_string); "unknown
    status" for codes it does not know. Local, thread-safe, leaves the last error alone."""
    return library().status_string(status)


def last_error() -> str:
    """The calling thread's last error message (epc_last_error): "" if the thread's last
    epcomm call succeeded. Local, thread-safe (the message is per thread)."""
    return library().last_error()


def api_table() -> "_ffi.EpcApi":
    """The library's dlopen function table (epc_get_api) for this binding's ABI major.

    Only the prefix this binding knows is written; `struct_size` in the result says how
    much of it the library filled. Local, thread-safe."""
    api = _ffi.EpcApi()
    api.struct_size = ctypes.sizeof(api)
    call("epc_get_api", BINDING_VERSION.major, ctypes.byref(api))
    return api
