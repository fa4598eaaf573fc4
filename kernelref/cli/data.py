"""Reading the command line's data files: CSV, libsvm/svmlight, .npy/.npz, Zarr.

`read` returns ``(X, y)`` (``y`` is ``None`` without a target), `read_weighted`
``(X, y, w)`` with the sample weights of a ``--weight`` column; a malformed file
is refused with a `DataError` naming the file, the line and the column, and
saying how to fix it.
"""

import csv
import hashlib
import os
import re

import numpy as np

_FIELD = re.compile(r"\S+")


class DataError(ValueError):
    """A data file the command line cannot read; the message names where and why."""


def read(path, target=None, header="auto", lazy=False, sparse=False, width=None):
    """X and y from the file at `path`, by its extension.

    `target` names the target column (a CSV header name, or an integer index
    counted from 0, negative from the end; for .npz and Zarr groups the name of
    the target array). libsvm files always carry their target. With `lazy`, a
    Zarr array is returned as a dask array, read chunk by chunk by the backend.
    With `sparse` (the model takes scipy.sparse X), a libsvm file of stored
    entries below `SPARSE_DENSITY` and a scipy.sparse .npz (``save_npz``) are
    returned as CSR, never made dense; else dense. `width` (the model's
    ``n_features_in_``) pads a libsvm file's X with the zero columns its lines
    omit, as libsvm's svm-predict does.
    """
    X, y, _ = read_weighted(path, target, None, header, lazy, sparse, width)
    return X, y


def read_weighted(
    path,
    target=None,
    weight=None,
    header="auto",
    lazy=False,
    sparse=False,
    width=None,
):
    """X, y and the sample weights w from the file at `path` (`read`'s rules).

    `weight` names the weight column as `target` names the target's (a header
    name or a number from 0; for .npz and Zarr groups an array's name); it is
    removed from X like the target, and must not be the target's column. w is
    None without `weight`; floats when every entry is a number, else the text
    as given, which the estimator's ``sample_weight`` validation refuses by
    name (as it refuses negative or non-finite weights). A libsvm file has no
    columns: `weight` is refused there.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"{path}: no such data file; check the path.")
    kind = format_of(path)
    if kind == "libsvm":
        if target is not None:
            raise DataError(
                f"{path}: a libsvm file has its target in the first field; "
                "drop --target."
            )
        if weight is not None:
            raise DataError(
                f"{path}: a libsvm file has no columns to read weights from (its "
                "lines are 'label index:value ...'); drop --weight, or write the "
                "data as CSV with a weight column or as .npz with a weight array."
            )
        return (*read_libsvm_as(path, sparse, width), None)
    if kind == "csv":
        return read_csv(path, target, header, weight)
    if kind == "npy":
        found = _split(np.load(path, allow_pickle=False), target, path, weight)
    elif kind == "npz":
        arrays = np.load(path, allow_pickle=False)
        if _SPARSE_NPZ <= set(arrays.keys()):
            return _read_sparse_npz(path, target, weight, sparse)
        found = _read_arrays(arrays, target, path, weight)
    else:
        found = _read_zarr(path, target, lazy, weight)
    return _check_shapes(path, *found)


def _check_shapes(path, X, y, w):
    """Arrays of an .npz or Zarr file that cannot be samples, targets and
    weights, refused naming the file before any work: X not 2-D, or y or w not
    one per row of X."""
    if np.ndim(X) != 2:
        hint = " (X.reshape(-1, 1) for one feature)" if np.ndim(X) == 1 else ""
        raise DataError(
            f"{path}: X has shape {tuple(X.shape)}; save it 2-D, samples × "
            f"features{hint}."
        )
    for name, a in (("the targets", y), ("the weights", w)):
        if a is not None and (np.ndim(a) == 0 or len(a) != X.shape[0]):
            raise DataError(
                f"{path}: {name} have shape {tuple(np.shape(a))} but X has "
                f"{X.shape[0]} rows; save one per row of X."
            )
    return X, y, w


#: below this fraction of stored entries a libsvm file is read as sparse for a
#: model that takes sparse X (above it, dense kernel blocks are faster)
SPARSE_DENSITY = 0.25

#: the arrays of a scipy.sparse.save_npz file
_SPARSE_NPZ = {"format", "shape", "data", "indices", "indptr"}

#: the largest X (bytes) made dense for a model that needs dense input
DENSE_MAX_BYTES = 1 << 30


def read_libsvm_as(path, sparse, width=None):
    """X and y of a libsvm file as a model takes X: CSR when it takes sparse X
    (`sparse`) and under `SPARSE_DENSITY` of the entries are stored, as libsvm
    keeps it; else dense (`dense`). `width`: `fit_width`'s."""
    X, y = read_libsvm(path, sparse=True)
    X = fit_width(X, width)
    return (X if sparse and density(X) < SPARSE_DENSITY else dense(X, path)), y


def density(X):
    """The fraction of X's entries stored (a CSR matrix)."""
    return X.nnz / max(1, X.shape[0] * X.shape[1])


def dense(X, path, user="this model"):
    """A sparse X as a dense array for a model (or kernel: `user`) that needs
    one; refused, before any work, when that array would exceed
    `DENSE_MAX_BYTES`."""
    size = 8 * X.shape[0] * X.shape[1]
    if size > DENSE_MAX_BYTES:
        from kernelref._validation import SPARSE_ESTIMATORS, SPARSE_KERNELS

        raise DataError(
            f"{path}: X is sparse ({X.shape[0]} × {X.shape[1]}, {X.nnz} stored "
            f"entries) and {user} needs it dense, {size / 2**30:.1f} GiB. Use a "
            f"model that takes sparse X ({SPARSE_ESTIMATORS}, with the kernel "
            f"{SPARSE_KERNELS}), or fewer samples or features."
        )
    return X.toarray()


def fit_width(X, width):
    """libsvm files omit trailing zero features: X (CSR) padded with zero columns,
    or cut of all-zero ones, to `width` (None: X as read)."""
    if width is None or X.shape[1] == width:
        return X
    if X.shape[1] < width:
        return type(X)((X.data, X.indices, X.indptr), shape=(X.shape[0], width))
    return X[:, :width] if X[:, width:].count_nonzero() == 0 else X


def _read_sparse_npz(path, target, weight, sparse):
    """A scipy.sparse.save_npz file: X alone (CSR, or dense for a model that
    needs dense X); it has no target or weight arrays to name."""
    if target is not None or weight is not None:
        raise DataError(
            f"{path}: a scipy.sparse .npz file (save_npz) holds X only, no "
            f"{'target' if target is not None else 'weight'} array; drop "
            f"--{'target' if target is not None else 'weight'}, or write the data "
            "with its labels in libsvm format (sklearn.datasets.dump_svmlight_file)."
        )
    from scipy.sparse import load_npz

    X = load_npz(path).tocsr()
    return (X if sparse else dense(X, path)), None, None


def format_of(path):
    """The format by extension (.csv .tsv .npy .npz .zarr), else by content."""
    lower = path.lower().rstrip("/")
    for suffix, kind in (
        (".csv", "csv"),
        (".tsv", "csv"),
        (".npy", "npy"),
        (".npz", "npz"),
        (".zarr", "zarr"),
    ):
        if lower.endswith(suffix):
            return kind
    if os.path.isdir(path):
        return "zarr"
    return "libsvm" if _looks_libsvm(path) else "csv"


def _looks_libsvm(path):
    """A first data line like ``+1 3:0.5 7:1`` (or a bare label: no features)."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for line in f:
            fields = line.split("#", 1)[0].split()
            if fields:
                return "," not in line and (len(fields) == 1 or ":" in fields[1])
    return False


def read_libsvm(path, sparse=False, first=1):
    """libsvm's sparse format: ``label index:value ...`` with indices from
    `first` (1; 0 for libsvm's precomputed kernels, whose ``0:i`` is the serial
    number) in increasing order; ``#`` starts a comment (svmlight). Index i is
    column i − `first`, and X has a column for each index up to the largest, as
    libsvm's ``svm-train`` reads it: dense, or with `sparse` a CSR matrix of the
    stored entries."""
    if not os.path.exists(path):
        raise DataError(f"{path}: no such data file; check the path.")
    labels, rows, width = [], [], 0
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, 1):
            fields = [
                (m.start() + 1, m.group())
                for m in _FIELD.finditer(line.split("#", 1)[0])
            ]
            if not fields:
                continue
            labels.append(_number(fields[0][1], path, number, 1, "the label"))
            row, previous = {}, first - 1
            for column, field in fields[1:]:
                index, colon, value = field.partition(":")
                if not colon or not index.isdigit() or int(index) < first:
                    raise DataError(
                        f"{path}:{number}:{column}: expected index:value with an index "
                        f"from {first}, got {field!r}. libsvm lines read "
                        f"'label {first}:0.5 4:2.0'."
                    )
                if int(index) <= previous:
                    raise DataError(
                        f"{path}:{number}:{column}: index {index} does not increase "
                        f"(after {previous}); sort each line's indices."
                    )
                previous = int(index)
                row[previous] = _number(
                    value,
                    path,
                    number,
                    column + len(index) + 1,
                    f"the value of feature {index}",
                )
            width = max(width, previous + 1 - first)
            rows.append(row)
    if not rows:
        raise DataError(
            f"{path}: no data lines; a libsvm file has one 'label i:v ...' per line."
        )
    from scipy.sparse import csr_matrix

    indptr = np.cumsum([0] + [len(row) for row in rows])
    indices = np.fromiter((i - first for row in rows for i in row), dtype=np.int64)
    values = np.fromiter((v for row in rows for v in row.values()), dtype=np.float64)
    X = csr_matrix((values, indices, indptr), shape=(len(rows), width))
    return (X if sparse else X.toarray()), np.array(labels)


def _number(text, path, line, column, what):
    try:
        value = float(text)
    except ValueError:
        raise DataError(
            f"{path}:{line}:{column}: {what} {text!r} is not a number; "
            "write it as e.g. 0.5 or 1e-3."
        ) from None
    if not np.isfinite(value):
        raise DataError(
            f"{path}:{line}:{column}: {what} is {text!r}; give finite numbers "
            "(drop or impute missing values first)."
        )
    return value


def read_csv(path, target=None, header="auto", weight=None):
    """A CSV file (comma, or tab for .tsv) of numbers, with or without a header
    row; the target column may hold class names. Returns X, y and the weights
    (None without `weight`)."""
    delimiter = "\t" if path.lower().endswith(".tsv") else ","
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = [
            (n, row)
            for n, row in enumerate(csv.reader(f, delimiter=delimiter), 1)
            if row and any(cell.strip() for cell in row)
        ]
    if not rows:
        raise DataError(f"{path}: the file has no rows.")
    _refuse_other_separator(path, rows, delimiter)
    names = None
    if header == "yes" or (header == "auto" and _is_header(rows)):
        names = [cell.strip() for cell in rows[0][1]]
        rows = rows[1:]
    width = len(rows[0][1]) if rows else len(names)
    j = _target_column(target, names, width, path)
    k = _weight_column(weight, j, names, width, path)
    features = [c for c in range(width) if c not in (j, k)]
    X = np.empty((len(rows), len(features)))
    y, w = [], []
    for i, (number, row) in enumerate(rows):
        if len(row) != width:
            raise DataError(
                f"{path}:{number}: {len(row)} columns where the first row has "
                f"{width}; every row needs the same columns."
            )
        for f, column in enumerate(features):
            name = f" ({names[column]!r})" if names else ""
            X[i, f] = _number(
                row[column].strip(),
                path,
                number,
                column + 1,
                f"column {column + 1}{name}",
            )
        if j is not None:
            y.append(row[j].strip())
        if k is not None:
            w.append(row[k].strip())
    _refuse_row_index(path, names, features, X)
    return (
        X,
        None if j is None else _labels(y),
        None if k is None else _labels(w),
    )


def feature_names(path, target=None, weight=None, header="auto"):
    """The names of a CSV file's feature columns (its header without the target
    and weight columns), or None: no header, or not a CSV file. Reads the
    first two rows only."""
    if not os.path.isfile(path) or format_of(path) != "csv":
        return None
    delimiter = "\t" if path.lower().endswith(".tsv") else ","
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = []
        for n, row in enumerate(csv.reader(f, delimiter=delimiter), 1):
            if row and any(cell.strip() for cell in row):
                rows.append((n, row))
            if len(rows) == 2:
                break
    if not rows or not (header == "yes" or (header == "auto" and _is_header(rows))):
        return None
    names = [cell.strip() for cell in rows[0][1]]
    dropped = {
        _target_column(column, names, len(names), path)
        for column in (target, weight)
        if column is not None
    }
    return [name for c, name in enumerate(names) if c not in dropped]


def _refuse_other_separator(path, rows, delimiter):
    """A file of one column whose first line holds ';' (or a tab, or ',' in a
    .tsv) separates its columns by another character (Excel's CSV in many
    locales uses ';' and a decimal comma): refused naming the separators read."""
    if len(rows[0][1]) != 1:
        return
    for other in ";\t,|":
        if other != delimiter and other in rows[0][1][0]:
            shown = "a tab" if other == "\t" else repr(other)
            raise DataError(
                f"{path}: line {rows[0][0]} has one column and holds {shown}: the "
                f"file separates its columns by {shown}. kernelref reads ',' in "
                ".csv files and tabs in .tsv files, with '.' as the decimal point; "
                "save the file so" + (" (or name it .tsv)." if other == "\t" else ".")
            )


def _refuse_row_index(path, names, features, X):
    """A first column without a name that counts the rows 0, 1, 2, ... is the
    index pandas' DataFrame.to_csv writes by default: as a feature, the model
    would learn from the row numbers. Refused, naming the fix."""
    if not names or names[0] != "" or 0 not in features or len(X) < 2:
        return
    if np.array_equal(X[:, features.index(0)], np.arange(len(X))):
        raise DataError(
            f"{path}: the first column has no name and counts the rows 0, 1, 2, "
            "...: the row index pandas writes (DataFrame.to_csv), which would be "
            "learnt from as a feature. Write the file with to_csv(index=False), "
            "or give the column a name if it is data."
        )


def _is_header(rows):
    def numeric(cell):
        try:
            float(cell)
        except ValueError:
            return False
        return True

    first = rows[0][1]
    if len(rows) == 1:
        return not any(numeric(c) for c in first)
    second = rows[1][1]
    return any(not numeric(a) and numeric(b) for a, b in zip(first, second)) or not any(
        numeric(c) for c in first
    )


def _target_column(target, names, width, path, option="--target"):
    if target is None:
        return None
    if names is not None and target in names:
        return names.index(target)
    try:
        j = int(target)
    except ValueError:
        known = f"the columns are {names}" if names else "the file has no header row"
        raise DataError(
            f"{path}: no column named {target!r} ({known}); give {option} as a "
            "header name or a column number counted from 0."
        ) from None
    if not -width <= j < width:
        raise DataError(
            f"{path}: {option} {j} is outside the {width} columns (0 to "
            f"{width - 1}, or negative from the end)."
        )
    return j % width


def _weight_column(weight, j, names, width, path):
    """The weight column's number; refused when it is the target's column `j`."""
    k = _target_column(weight, names, width, path, "--weight")
    if k is not None and k == j:
        name = f" ({names[k]!r})" if names else ""
        raise DataError(
            f"{path}: --weight {weight} is column {k}{name}, the target's column; "
            "the weights must be a column of their own."
        )
    return k


def _labels(values):
    """Targets as integers when all are written as integers (class labels 0 and
    1 come back as 0 and 1, not 0.0 and 1.0), as floats when all are numbers,
    else as the class names given."""
    for kind in (int, float):
        try:
            labels = np.array([kind(v) for v in values])
        except ValueError:
            continue
        if labels.dtype != object:  # integers beyond int64 are read as floats
            return labels
    return np.array(values)


def _split(A, target, path, weight=None):
    if A.ndim != 2:
        raise DataError(
            f"{path}: expected a 2-D array (samples × features); got shape {A.shape}."
        )
    j = _target_column(target, None, A.shape[1], path)
    k = _weight_column(weight, j, None, A.shape[1], path)
    dropped = [c for c in (j, k) if c is not None]
    return (
        np.delete(A, dropped, axis=1) if dropped else A,
        None if j is None else A[:, j],
        None if k is None else np.asarray(A[:, k]),
    )


def _read_arrays(arrays, target, path, weight=None):
    """An .npz or a Zarr group: array ``X``, the target array `target` (or
    ``y``) and the weight array `weight`."""
    keys = list(arrays.keys())
    if "X" not in keys:
        if len(keys) == 1:
            return _split(np.asarray(arrays[keys[0]]), target, path, weight)
        raise DataError(
            f"{path}: holds arrays {keys} but no 'X'; name the samples 'X' and the "
            "targets 'y'."
        )
    name = "y" if target is None and "y" in keys else target
    if name is not None and name not in keys:
        raise DataError(f"{path}: no target array {name!r}; the arrays are {keys}.")
    if weight is not None and weight not in keys:
        raise DataError(
            f"{path}: no weight array {weight!r}; the arrays are {keys}. Give "
            "--weight as the name of the array of sample weights."
        )
    if weight is not None and weight in ("X", name):
        raise DataError(
            f"{path}: --weight {weight} is the "
            f"{'samples array' if weight == 'X' else 'target array'}; the weights "
            "must be an array of their own."
        )
    return (
        arrays["X"],
        None if name is None else np.asarray(arrays[name]),
        None if weight is None else np.asarray(arrays[weight]),
    )


def _read_zarr(path, target, lazy, weight=None):
    try:
        import zarr
    except ImportError:
        raise DataError(
            f"{path}: reading Zarr needs the dask extra: pip install 'kernelref[dask]'."
        ) from None
    try:
        # an absolute path: a lazy array is read by the workers, whose working
        # directory need not be ours (a relative path read zeros there)
        node = zarr.open(store=os.path.abspath(path), mode="r")
    except Exception as error:  # noqa: BLE001 (zarr raises many kinds)
        raise DataError(f"{path}: not a Zarr array or group ({error}).") from None
    if isinstance(node, zarr.Array):
        A = _lazy(node) if lazy else node[...]
        if A.ndim == 2 or weight is not None:
            return _split(A, target, path, weight)
        return A, None, None
    arrays = {name: node[name] for name in node.array_keys()}
    X, y, w = _read_arrays(arrays, target, path, weight)
    X = _lazy(X) if lazy else np.asarray(X[...])
    return (
        X,
        None if y is None else np.asarray(y[...]),
        None if w is None else np.asarray(w[...]),
    )


def _lazy(array):
    import dask.array as da

    return da.from_zarr(array)


def fingerprint(path):
    """sha256 of the data file's bytes; for a directory (a Zarr store), of every
    file's relative path and bytes, so that two stores of other numbers differ
    even where their file names are the same."""
    digest = hashlib.sha256()
    if os.path.isdir(path):
        for root, _, files in sorted(os.walk(path)):
            for name in sorted(files):
                file = os.path.join(root, name)
                digest.update(os.path.relpath(file, path).encode() + b"\0")
                _digest_file(digest, file)
        return {"path": os.path.abspath(path), "files_sha256": digest.hexdigest()}
    _digest_file(digest, path)
    return {"path": os.path.abspath(path), "sha256": digest.hexdigest()}


def _digest_file(digest, path):
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)


def same_data(recorded, path):
    """Whether the data file at `path` is the one `recorded` (a `fingerprint`
    kept in a model file) describes: the same digest of the same kind. A
    fingerprint without a digest matches nothing."""
    now = fingerprint(path)
    return any(
        recorded.get(key) is not None and recorded.get(key) == now.get(key)
        for key in ("sha256", "files_sha256")
    )
