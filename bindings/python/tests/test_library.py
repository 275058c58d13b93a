# SPDX-License-Identifier: Apache-2.0
"""Loading the library, versions, status codes and the per-thread last error."""

import ctypes
import shutil
import subprocess
import threading

import pytest

import epcomm
from epcomm import _ffi, _library


def test_version_matches_the_header():
    v = epcomm.version()
    assert isinstance(v, epcomm.Version)
    assert (v.major, v.minor, v.patch) == (_ffi.EPC_ABI_MAJOR, _ffi.EPC_ABI_MINOR, _ffi.EPC_ABI_PATCH)
    assert str(v) == _ffi.HEADER_ABI_VERSION


def test_the_loaded_library_exports_every_generated_function():
    assert epcomm.load_library().missing == frozenset()


def test_status_names_and_library_strings():
    assert epcomm.Status.OK == 0 and epcomm.Status.OK.ok
    assert epcomm.Status.INVALID_ARGUMENT == _ffi.EPC_ERR_INVALID_ARGUMENT
    assert epcomm.Status(7) is not None and epcomm.Status(7).name == "TIMEOUT"
    assert epcomm.status_string(epcomm.Status.OK) == "success"
    assert epcomm.Status.INVALID_ARGUMENT.describe() == "invalid argument"
    assert epcomm.Status.TIMEOUT.describe().startswith("timeout")
    for name, value in vars(_ffi).items():
        if name.startswith("EPC_ERR_"):
            assert getattr(epcomm.Status, name[len("EPC_ERR_") :]) == value
            assert epcomm.status_string(value) != "unknown status", name


def test_unknown_status_codes_are_kept():
    unknown = epcomm.Status(4242)
    assert unknown == 4242 and isinstance(unknown, int)
    assert unknown.name is None and not unknown.ok
    assert repr(unknown) == "Status(4242)"
    assert unknown.describe() == "unknown status"
    error = epcomm.EpcError(4242, "from a newer library")
    assert error.status == 4242 and "unknown status 4242" in str(error)


def test_failure_raises_with_the_thread_last_error():
    with pytest.raises(epcomm.EpcError) as caught:
        epcomm.plan_query(epcomm.GroupConfig(num_experts=256, hidden=0), 4)
    error = caught.value
    assert error.status == epcomm.Status.INVALID_ARGUMENT
    assert error.function == "epc_plan_query"
    assert "hidden" in error.message
    assert error.message in str(error)
    # The message stays readable until the thread's next call, which clears it.
    assert epcomm.last_error() == error.message
    epcomm.plan_query(epcomm.GroupConfig(num_experts=256, hidden=7168), 4)
    assert epcomm.last_error() == ""


def test_last_error_is_per_thread():
    with pytest.raises(epcomm.EpcError):
        epcomm.plan_query(epcomm.GroupConfig(num_experts=256, hidden=0), 4)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(epcomm.last_error()))
    thread.start()
    thread.join()
    assert seen == [""]
    assert "hidden" in epcomm.last_error()


def test_errors_from_many_threads_keep_their_own_messages():
    results = {}

    def fail(hidden):
        try:
            epcomm.plan_query(epcomm.GroupConfig(num_experts=256, hidden=hidden), 4)
        except epcomm.EpcError as error:
            results[hidden] = error.message

    threads = [threading.Thread(target=fail, args=(h,)) for h in (0, 3, 5, 7, 0, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert "hidden is 0" in results[0]
    for hidden in (3, 5, 7, 9):
        assert f"hidden is {hidden}" in results[hidden]


def test_api_table_points_at_the_exports():
    api = epcomm.api_table()
    assert api.abi_version == _ffi.EPC_ABI_VERSION
    assert api.struct_size == ctypes.sizeof(_ffi.EpcApi)
    assert api.status_string(_ffi.EPC_ERR_TIMEOUT) == epcomm.status_string(_ffi.EPC_ERR_TIMEOUT).encode()
    cdll = epcomm.load_library().cdll
    for name, _ in _ffi.EpcApi._fields_[2:]:
        entry = ctypes.cast(getattr(api, name), ctypes.c_void_p).value
        export = ctypes.cast(getattr(cdll, f"epc_{name}"), ctypes.c_void_p).value
        assert entry == export, name


def test_a_missing_library_says_how_to_point_at_it():
    with pytest.raises(OSError, match="EPCOMM_LIB"):
        _library.Library("/nonexistent/libepcomm.so.2")


def test_loading_another_path_after_the_first_is_refused():
    epcomm.load_library()
    with pytest.raises(RuntimeError, match="already loaded"):
        epcomm.load_library("/somewhere/else/libepcomm.so.2")


def _compile_fake_library(tmp_path, major):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc/gcc) to build a fake library with another ABI major")
    source = tmp_path / "fake.c"
    source.write_text(f"""
#include <stddef.h>
#include <stdint.h>
int32_t epc_get_version(uint32_t* a, uint32_t* b, uint32_t* c) {{
  if (a) *a = {major}; if (b) *b = 0; if (c) *c = 0; return 0; }}
int32_t epc_last_error(char* buf, size_t n, size_t* len) {{
  if (n) buf[0] = 0; if (len) *len = 0; return 0; }}
const char* epc_status_string(int32_t s) {{ (void)s; return "fake"; }}
""")
    library = tmp_path / f"libfake{major}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def test_a_library_of_another_abi_major_is_refused(tmp_path):
    library = _compile_fake_library(tmp_path, _ffi.EPC_ABI_MAJOR + 1)
    with pytest.raises(epcomm.EpcError) as caught:
        _library.Library(str(library))
    assert caught.value.status == epcomm.Status.ABI_MISMATCH
    assert f"ABI {_ffi.EPC_ABI_MAJOR + 1}.0.0" in caught.value.message
    assert "major versions must be equal" in caught.value.message


def test_functions_an_older_library_lacks_raise_unsupported(tmp_path):
    library = _library.Library(str(_compile_fake_library(tmp_path, _ffi.EPC_ABI_MAJOR)))
    assert "epc_plan_query" in library.missing
    with pytest.raises(epcomm.EpcError) as caught:
        library.function("epc_plan_query")
    assert caught.value.status == epcomm.Status.UNSUPPORTED
    assert "epc_plan_query is not exported" in caught.value.message


def test_errors_pickle():
    import pickle

    error = pickle.loads(pickle.dumps(epcomm.EpcError(7, "peer 3 stalled", "epc_group_barrier")))
    assert (error.status, error.message, error.function) == (7, "peer 3 stalled", "epc_group_barrier")
    tensor_error = pickle.loads(pickle.dumps(epcomm.InvalidTensorError("bad")))
    assert isinstance(tensor_error, ValueError) and tensor_error.message == "bad"
