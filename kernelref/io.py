"""Model files: fitted estimators saved as data, never as pickles.

A model file is one file, laid out like safetensors with a checksum at the end:

====================  =========================================================
bytes                 content
====================  =========================================================
8                     the magic ``b"\\x89KREFMDL"``
4, 4                  format version and reserved flags, little-endian uint32
8                     length H of the JSON header, little-endian uint64
H                     the JSON header (UTF-8)
as the header says    the arrays' raw little-endian bytes, each 64-byte aligned
32                    sha256 of everything before it
====================  =========================================================

The header holds the format name ``"kernelref.model"``, the estimator as a
tree of JSON nodes, the arrays' dtype, shape and offset, and the provenance
(library version, date, the fingerprint of the training data when known).

Loading runs no code from the file. A node names a class by ``module:name``,
and `load` resolves it only when the module belongs to ``kernelref`` or to the
package of a backend registered in the entry point group ``kernelref.backends``
(``backends.dask``; ``kernelref.cli.plugins``) and the class is an estimator, a
kernel or one of their data records (dataclasses such as ``GaussianMixture``);
nothing else is ever imported or called. An estimator is rebuilt by its constructor
with the saved parameters, and its fitted state — everything
``__getstate__`` returns besides the parameters — is set back attribute by
attribute, so a new estimator needs no code here. A backend model
(``backends.dask.KernelRidge``, say) is saved under its own class and also
names its reference class; where its backend is not installed it loads as
the reference class, which predicts alike when the fitted state is the
reference's (KernelRidge, the SVMs). An array a backend keeps in
its Zarr store (an N × N Cholesky factor, say) is not copied into the file:
the file names the store and the array, and loading opens it read-only, so
such a model file is valid only while its store stays where it was.
"""

import dataclasses
import datetime
import hashlib
import importlib
import inspect
import json
import numbers
import os
import re
import secrets
import struct
import tempfile

import numpy as np

FORMAT = "kernelref.model"
FORMAT_VERSION = 1
MAGIC = b"\x89KREFMDL"
_PREFIX = struct.Struct("<8sIIQ")
_DIGEST = 32
_ALIGN = 64
#: array kinds stored raw: booleans, integers, floats, complex, and fixed-width text
_KINDS = "biufcUS"
_MODULE = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ModelFileError(ValueError):
    """A file that is not a readable kernelref model file; the message names it."""


class _Unregistered(ValueError):
    """A class outside kernelref and every registered backend's package."""


# -- saving ----------------------------------------------------------------------------
def save(estimator, path, provenance=None):
    """Write `estimator` to `path` as a kernelref model file.

    The file is written under a temporary name in the same directory and
    renamed over `path` only when complete, so `path` never holds half a
    file. `provenance` (a JSON-serialisable dict, e.g. the training data's
    fingerprint) is stored with the library version and the date.
    """
    from kernelref import __version__

    arrays = []
    tree = _encode(estimator, arrays, "model")
    if "estimator" not in tree:
        raise TypeError(
            f"save takes a kernelref estimator; got {type(estimator).__name__}."
        )
    table, offset = [], 0
    for a in arrays:
        offset = -(-offset // _ALIGN) * _ALIGN
        table.append({"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset})
        offset += a.nbytes
    header = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "estimator": tree["estimator"],
        "kernel": _kernel_summary(estimator),
        "provenance": {
            "library": "kernelref",
            "library_version": __version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            **(provenance or {}),
        },
        "model": tree,
        "arrays": table,
        "data_bytes": offset,
    }
    header_bytes = json.dumps(header, allow_nan=False).encode()
    _write_atomically(os.fspath(path), header_bytes, arrays, table)
    return path


def _write_atomically(path, header_bytes, arrays, table):
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = _temporary_file(directory, path)
    try:
        with os.fdopen(fd, "wb") as f:
            digest = hashlib.sha256()

            def write(data):
                digest.update(data)
                f.write(data)

            write(_PREFIX.pack(MAGIC, FORMAT_VERSION, 0, len(header_bytes)))
            write(header_bytes)
            position = 0
            for a, entry in zip(arrays, table):
                write(b"\0" * (entry["offset"] - position))
                if a.size:  # memoryview cannot cast an empty array (shape with 0)
                    write(memoryview(np.ascontiguousarray(a)).cast("B"))
                position = entry["offset"] + a.nbytes
            f.write(digest.digest())
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def _temporary_file(directory, path):
    """A new file in `directory` to be renamed over `path`: (descriptor, name).

    Its permissions are those ``open(path, "wb")`` gives, as numpy.save and
    joblib's files have: an existing `path`'s mode, else 0666 less the umask
    (0644 under umask 022), applied by the system as the file is created
    (``tempfile.mkstemp`` gives 0600, which other users could not read).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(tempfile.TMP_MAX):
        name = os.path.join(directory, f".kernelref-{secrets.token_hex(8)}.part")
        try:
            fd = os.open(name, flags, 0o666)
        except FileExistsError:
            continue
        try:
            os.chmod(name, os.stat(path).st_mode & 0o777)
        except FileNotFoundError:  # a new file: the umask's mode
            pass
        except BaseException:
            os.close(fd)
            os.remove(name)
            raise
        return fd, name
    raise FileExistsError(f"no unused temporary name in {directory}")


def _class_path(cls):
    return f"{cls.__module__}:{cls.__qualname__}"


def _reference_class(cls):
    """The first class of kernelref in `cls`'s ancestry (itself if it is one)."""
    return next(c for c in cls.__mro__ if c.__module__.startswith("kernelref"))


def _kernel_summary(estimator):
    """The fitted (else the given) kernel's spec, for people reading the header."""
    kernel = getattr(estimator, "kernel_", getattr(estimator, "kernel", None))
    if hasattr(kernel, "spec"):
        try:
            return json.loads(
                json.dumps(kernel.spec(), allow_nan=False, default=_plain)
            )
        except (TypeError, ValueError):
            return repr(kernel)
    return kernel if isinstance(kernel, (str, type(None))) else repr(kernel)


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _encode(value, arrays, where):
    """A JSON node for `value`; arrays go to `arrays`, the node keeps their index.
    `where` names the attribute for error messages."""
    from kernelref.base import BaseEstimator
    from kernelref.kernels.base import Kernel

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, os.PathLike):  # store=pathlib.Path(...): kept as its text
        return os.fspath(value)
    if isinstance(value, int):
        return value if abs(value) < 2**53 else {"int": str(value)}
    if isinstance(value, float):
        return value if np.isfinite(value) else {"float": repr(value)}
    if isinstance(value, np.generic) and value.dtype != object:
        arrays.append(np.asarray(value).astype(value.dtype.newbyteorder("<")))
        return {"scalar": len(arrays) - 1}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {
                "objects": [
                    _encode(v, arrays, f"{where}[{i}]")
                    for i, v in enumerate(value.ravel())
                ],
                "shape": list(value.shape),
            }
        if value.dtype.kind not in _KINDS:
            raise TypeError(
                f"cannot save {where}: arrays of dtype {value.dtype} are not stored."
            )
        arrays.append(value.astype(value.dtype.newbyteorder("<"), copy=False))
        return {"array": len(arrays) - 1}
    if _is_sparse(value):
        csr = value.tocsr()
        return {
            "sparse": "csr_array"
            if type(value).__name__.endswith("array")
            else "csr_matrix",
            "shape": list(csr.shape),
            "parts": [
                _encode(getattr(csr, name), arrays, f"{where}.{name}")
                for name in ("data", "indices", "indptr")
            ],
        }
    if _is_zarr_array(value):
        # an array kept in a backend's store (an N × N factor, say) is referenced, not
        # copied: the model file names the store, which must stay where it is
        return {
            "zarr_array": os.path.abspath(str(value.store.root)),
            "path": value.path,
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        kind = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}
        kind = next(name for t, name in kind.items() if isinstance(value, t))
        items = sorted(value, key=repr) if kind in ("set", "frozenset") else value
        return {
            kind: [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(items)]
        }
    if isinstance(value, dict):
        return {
            "dict": [
                [_encode(k, arrays, where), _encode(v, arrays, f"{where}[{k!r}]")]
                for k, v in value.items()
            ]
        }
    if isinstance(value, Kernel):
        return {
            "kernel": _class_path(type(value)),
            "params": _encode_dict(value.get_params(deep=False), arrays, where),
        }
    if isinstance(value, BaseEstimator):
        return _encode_estimator(value, arrays, where)
    if dataclasses.is_dataclass(value) and _MODULE.match(type(value).__module__):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {
            "record": _class_path(type(value)),
            "fields": _encode_dict(fields, arrays, where),
        }
    raise TypeError(
        f"cannot save {where}: a {type(value).__module__}.{type(value).__qualname__} "
        "is neither an array, a number, a string, a container of those, a kernel, an "
        "estimator nor a kernelref data record. Model files store data only (no "
        "pickle); a function, for instance, cannot be stored — refit with a named "
        "kernel or built-in option."
    )


def _is_sparse(value):
    """A scipy.sparse matrix, without importing scipy.sparse for dense models."""
    return type(value).__module__.startswith("scipy.sparse") and hasattr(value, "tocsr")


def _is_zarr_array(value):
    return type(value).__module__.startswith("zarr.") and hasattr(
        getattr(value, "store", None), "root"
    )


def _encode_dict(mapping, arrays, where):
    return {name: _encode(v, arrays, f"{where}.{name}") for name, v in mapping.items()}


def _encode_estimator(estimator, arrays, where):
    cls = type(estimator)
    params = estimator.get_params(deep=False)
    if callable(params.get("progress")):
        # a backend fit's progress= callback shows one run, it is no part of the
        # model (and a function cannot be stored): saved as no callback
        params["progress"] = None
    # __getstate__ is what the class itself declares as its state (3.11+; vars before).
    get_state = getattr(estimator, "__getstate__", lambda: vars(estimator))
    state = {name: v for name, v in get_state().items() if name not in params}
    node = {
        "estimator": _class_path(cls),
        "params": _encode_dict(params, arrays, where),
        "state": _encode_dict(state, arrays, where),
    }
    reference = _reference_class(cls)
    if reference is not cls:
        node["reference"] = _class_path(reference)
    return node


# -- loading ---------------------------------------------------------------------------
def load(path):
    """The estimator saved in the model file at `path`, ready to predict.

    Refuses, with a `ModelFileError` naming the file, anything that is not a
    complete, intact model file of a format version this library reads.
    """
    header, data = _read(os.fspath(path))
    try:
        return _decode(header["model"], _arrays(header, data, path))
    except ModelFileError as error:
        if str(error).startswith("the model's store"):
            raise ModelFileError(f"{path}: {error}") from None
        raise
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as error:
        raise ModelFileError(
            f"{path}: the model file's content is inconsistent ({error}); "
            "it was not written by kernelref.save."
        ) from None


def read_header(path):
    """The JSON header of the model file at `path`, checked as `load` checks it."""
    return _read(os.fspath(path))[0]


def _read(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such model file; check the path.") from None
    except IsADirectoryError:
        raise ModelFileError(
            f"{path} is a directory, not a model file "
            "(a Gram store? `kernelref info` shows what it is)."
        ) from None
    if raw[:8] != MAGIC:
        raise ModelFileError(
            f"{path} is not a kernelref model file: {_what_it_is(raw)}"
        )
    if len(raw) < _PREFIX.size + _DIGEST:
        raise ModelFileError(
            f"{path} is truncated ({len(raw)} bytes); save the model again."
        )
    _, version, _, header_size = _PREFIX.unpack_from(raw)
    if version > FORMAT_VERSION:
        raise ModelFileError(
            f"{path} has model format version {version}, newer than the "
            f"{FORMAT_VERSION} this kernelref reads; upgrade kernelref to load it."
        )
    body, digest = raw[:-_DIGEST], raw[-_DIGEST:]
    start = _PREFIX.size + header_size
    try:
        header = json.loads(raw[_PREFIX.size : start])
        expected = start + header["data_bytes"] + _DIGEST
    except (ValueError, KeyError, TypeError):
        header, expected = None, None
    if expected is not None and len(raw) < expected:
        raise ModelFileError(
            f"{path} is truncated: {len(raw)} bytes of {expected}; the copy "
            "or the save was cut short. Copy or save it again."
        )
    if (
        hashlib.sha256(body).digest() != digest
        or header is None
        or len(raw) != expected
    ):
        raise ModelFileError(
            f"{path} is corrupted: its sha256 checksum does not match its "
            "content. Copy or save it again."
        )
    if header.get("format") != FORMAT:
        raise ModelFileError(
            f"{path} holds format {header.get('format')!r}, not {FORMAT!r}."
        )
    return header, memoryview(bytearray(raw))[start : start + header["data_bytes"]]


def _what_it_is(raw):
    if raw[:1] == b"\x80" or raw[:2] in (b"(d", b"(l", b"cc"):
        return (
            "it looks like a Python pickle, which kernelref never loads because "
            "unpickling runs code. Load it with the library that wrote it and save it "
            "again with model.save(path)."
        )
    if raw[:6] == b"\x93NUMPY":
        return "it is a NumPy .npy array; pass it as data (--data), not as a model."
    if not raw:
        return "it is empty."
    return "it does not start with the kernelref model signature."


def _arrays(header, data, path):
    arrays = []
    for entry in header["arrays"]:
        dtype = np.dtype(entry["dtype"])
        if dtype.kind not in _KINDS or dtype.byteorder == ">":
            raise ModelFileError(
                f"{path}: array dtype {entry['dtype']!r} is not allowed."
            )
        count = int(np.prod(entry["shape"], dtype=np.int64))
        a = (
            np.frombuffer(data, dtype=dtype, count=count, offset=entry["offset"])
            if count
            else np.empty(0, dtype=dtype)
        )
        arrays.append(a.reshape(entry["shape"]))
    return arrays


def _decode(node, arrays):
    if node is None or isinstance(node, (bool, str, int, float)):
        return node
    if isinstance(node, list):
        raise TypeError("a bare JSON list is not a node")
    key, value = next(iter(node.items()))
    if key == "int":
        return int(value)
    if key == "float":
        return float(value)
    if key == "array":
        return arrays[value]
    if key == "scalar":
        return arrays[value][()]
    if key == "objects":
        out = np.empty(len(value), dtype=object)
        for i, item in enumerate(value):
            out[i] = _decode(item, arrays)
        return out.reshape(node["shape"])
    if key == "zarr_array":
        import zarr

        if not os.path.isdir(value):
            # the file itself is intact: not "inconsistent", as load says of a
            # ValueError; the model file names this path when load reraises
            raise ModelFileError(
                f"the model's store {value} is gone; the model file refers to "
                "arrays kept there by this absolute path: move the store back (or "
                "refit)."
            )
        return zarr.open_array(store=value, path=node["path"], mode="r")
    if key == "sparse":
        import scipy.sparse

        kind = "csr_array" if node["sparse"] == "csr_array" else "csr_matrix"
        data, indices, indptr = (_decode(part, arrays) for part in node["parts"])
        return getattr(scipy.sparse, kind)(
            (data, indices, indptr), shape=tuple(node["shape"])
        )
    containers = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
    if key in containers:
        return containers[key](_decode(v, arrays) for v in value)
    if key == "dict":
        return {_decode(k, arrays): _decode(v, arrays) for k, v in value}
    if key == "kernel":
        from kernelref.kernels.base import Kernel

        cls = _resolve(value, Kernel)
        return cls(**_decode_dict(node["params"], arrays))
    if key == "record":
        cls = _resolve(value, None)
        return cls(**_decode_dict(node["fields"], arrays))
    if key == "estimator":
        return _decode_estimator(node, arrays)
    raise ValueError(f"unknown node {key!r}")


def _decode_dict(mapping, arrays):
    return {name: _decode(v, arrays) for name, v in mapping.items()}


def _decode_estimator(node, arrays):
    from kernelref.base import BaseEstimator

    params = _decode_dict(node["params"], arrays)
    try:
        cls = _resolve(node["estimator"], BaseEstimator)
    except (ImportError, _Unregistered):
        if "reference" not in node:
            raise
        # its backend is not installed here: the reference class predicts alike.
        cls = _resolve(node["reference"], BaseEstimator)
        accepted = inspect.signature(cls.__init__).parameters
        params = {name: v for name, v in params.items() if name in accepted}
    estimator = cls(**params)
    for name, value in node["state"].items():
        # fitted state is data: plain attribute names only, never a dunder or a method
        if (
            not _NAME.match(name)
            or name.startswith("__")
            or callable(getattr(cls, name, None))
        ):
            raise ValueError(f"{name!r} is not an attribute a model file may set")
        setattr(estimator, name, _decode(value, arrays))
    return estimator


def _allowed_packages():
    """kernelref and the packages of the registered backends (not imported)."""
    from kernelref.cli.plugins import packages

    return ["kernelref", *packages()]


def _resolve(path, base):
    """The class at ``module:name``, only from kernelref or a registered backend's
    package, and only a subclass of `base` (or, with ``base=None``, a dataclass
    record)."""
    module, _, name = path.partition(":")
    allowed = _allowed_packages()
    inside = any(module == p or module.startswith(p + ".") for p in allowed)
    if not (_MODULE.match(module) and _NAME.match(name) and inside):
        raise _Unregistered(
            f"class {path!r} is outside kernelref and the registered backends "
            f"{allowed[1:]}; a backend model loads only where its backend is "
            "installed (pip install 'kernelref[dask]' for backends.dask)."
        )
    cls = getattr(importlib.import_module(module), name, None)
    ok = (
        isinstance(cls, type)
        and cls.__module__ == module
        and (
            issubclass(cls, base) if base is not None else dataclasses.is_dataclass(cls)
        )
    )
    if not ok:
        raise ValueError(f"{path!r} is not an allowed kernelref class")
    return cls


def describe(path):
    """A short human-readable account of the model file at `path`
    (for ``kernelref info``)."""
    header = read_header(path)
    model = header["model"]
    state = model.get("state", {})
    lines = [
        f"{path}: {FORMAT} version {header['version']}",
        f"estimator: {header['estimator']}",
        f"parameters: {_summary(model['params'])}",
        f"kernel: {json.dumps(header['kernel'])}",
        f"fitted attributes: {', '.join(n for n in state if n.endswith('_'))}",
        f"arrays: {len(header['arrays'])}, {header['data_bytes']} bytes",
    ]
    lines += [
        f"provenance.{k}: {json.dumps(v)}" for k, v in header["provenance"].items()
    ]
    return "\n".join(lines)


def _summary(params):
    shown = {
        k: v
        for k, v in params.items()
        if isinstance(v, (str, numbers.Number, type(None)))
    }
    return ", ".join(f"{k}={v!r}" for k, v in shown.items())
