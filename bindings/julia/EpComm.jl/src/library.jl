# SPDX-License-Identifier: Apache-2.0
# Loading the C library: which file, and whether its ABI is one this binding can call.

"""
    LibraryError(message)

The epcomm C library could not be loaded, or it implements another ABI major version than
the one `LibEpComm` was generated from.
"""
struct LibraryError <: Exception
    message::String
end

Base.showerror(io::IO, error::LibraryError) = print(io, "LibraryError: ", error.message)

"The library loaded when neither the preference nor `EPCOMM_LIB` is set: the SONAME of this ABI major version."
const DEFAULT_LIBRARY = "libepcomm.so.$(EPC_ABI_MAJOR)"

"""
The Preferences.jl key that names the library: a path or a file name for `dlopen`. Set it in
the project's `LocalPreferences.toml`:

    [EpComm]
    libepcomm = "/opt/epcomm/lib/libepcomm.so.2"

or with `Preferences.set_preferences!(EpComm, "libepcomm" => path)`, then restart Julia.
"""
const LIBRARY_PREFERENCE = "libepcomm"

"Which library to load: `ENV[\"EPCOMM_LIB\"]` (a one-off override), else the preference, else the SONAME."
library_request() = get(ENV, "EPCOMM_LIB", load_preference(@__MODULE__, LIBRARY_PREFERENCE, DEFAULT_LIBRARY))

function load_library!()
    requested = library_request()
    handle = try
        Libdl.dlopen(requested)
    catch error
        throw(LibraryError("cannot load the epcomm C library \"$requested\": " *
                           sprint(showerror, error) * ". Set ENV[\"EPCOMM_LIB\"] to the path " *
                           "of $DEFAULT_LIBRARY (in a build tree: build/capi/$DEFAULT_LIBRARY), set the " *
                           "\"$LIBRARY_PREFERENCE\" preference in LocalPreferences.toml, " *
                           "or put its directory on LD_LIBRARY_PATH."))
    end
    path = Libdl.dlpath(handle)
    if Libdl.dlsym(handle, :epc_get_version; throw_error = false) === nothing
        throw(LibraryError("\"$requested\" ($path) is not the epcomm C library: it has no epc_get_version"))
    end
    # Every @ccall resolves its symbol in this file on its first call; set it before any call.
    libepcomm_path[] = path
    loaded = version()
    if loaded.major != EPC_ABI_MAJOR
        throw(LibraryError("$path implements the epcomm C ABI $loaded, but this EpComm was " *
                           "generated for ABI $(binding_version()): the major versions must " *
                           "match. Point EPCOMM_LIB at a $DEFAULT_LIBRARY."))
    end
    return nothing
end

"""
    library_path() -> String

The file the epcomm C library was loaded from.
"""
library_path() = libepcomm_path[]

"""
    version() -> VersionNumber

The ABI version of the loaded C library (`epc_get_version`). Its major equals
`LibEpComm.EPC_ABI_MAJOR` (checked at load time); a smaller minor than
[`binding_version`](@ref) means functions added since are missing. Local, thread-safe.
"""
function version()
    major, minor, patch = Ref{UInt32}(0), Ref{UInt32}(0), Ref{UInt32}(0)
    check(epc_get_version(major, minor, patch), :epc_get_version)
    return VersionNumber(major[], minor[], patch[])
end

"""
    binding_version() -> VersionNumber

The ABI version of the header `LibEpComm` was generated from.
"""
binding_version() = VersionNumber(EPC_ABI_MAJOR, EPC_ABI_MINOR, EPC_ABI_PATCH)
