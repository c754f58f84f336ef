"""MovieLens-100K / MovieLens-1M loader with the HMSFW paper's protocol (Appendix A.1).

Rated users and rated items become consecutive matrix rows and columns (sorted
by ID), users fall into seven age groups, and the ratings are split 80/10/10 at
random with seed 20260927.  The split is saved to disk and reused while the data
is unchanged (same number of ratings and the same SHA-256 of the ratings), so
every run of an experiment sees the same split.  Ratings are centred by the
training mean only.

MovieLens files may not be redistributed: nothing here copies them, and the
saved split holds only split labels and a checksum.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tempfile
import warnings
import zlib
from pathlib import Path

import numpy as np

from fullcomp.datasets import (
    AGE_GROUP_NAMES,
    DEFAULT_SPLIT_SEED,
    RatingData,
    assemble,
    split_assignment,
    valid_assignment,
)
from fullcomp.errors import DataError

# (ratings, users, items) of the published data sets: a file with other counts is not that data set.
ML100K_COUNTS = (100_000, 943, 1_682)
ML1M_COUNTS = (1_000_209, 6_040, 3_706)
# Lower age bounds of groups 1..6 (group 0 is under 18), for MovieLens-100K's ages in years.
AGE_BOUNDS = np.array([18, 25, 35, 45, 50, 56])
# MovieLens-1M stores an age *code* (its README): each code is already one of the seven groups.
ML1M_AGE_CODES = {1: 0, 18: 1, 25: 2, 35: 3, 45: 4, 50: 5, 56: 6}
SPLIT_FORMAT = 1  # bump when the saved split's meaning changes, so old files are recomputed

LAYOUTS = (
    "MovieLens-100K (u.data tab-separated user item rating timestamp, u.user user|age|gender|occupation|zip) "
    "or MovieLens-1M (ratings.dat or ratings.dat.gz UserID::MovieID::Rating::Timestamp, "
    "users.dat UserID::Gender::Age::Occupation::Zip; pass users= when users.dat lives elsewhere)"
)


def movielens(
    path: str | os.PathLike[str],
    *,
    users: str | os.PathLike[str] | None = None,
    split_seed: int = DEFAULT_SPLIT_SEED,
    cache: bool | str | os.PathLike[str] = True,
) -> RatingData:
    """Load MovieLens ratings with seven age groups and a saved, reused 80/10/10 split.

    Parameters
    ----------
    path:
        A folder holding ``u.data`` + ``u.user`` (MovieLens-100K layout) or ``ratings.dat`` /
        ``ratings.dat.gz`` + ``users.dat`` (MovieLens-1M layout), or the ratings file itself.
    users:
        The users file (or a folder holding it) when it is not next to the ratings, e.g.
        ``shared/data/ml-1m/users.dat`` for ``shared/data/ml-1m-ratings-partial``.  Default: next to the ratings.
    split_seed:
        Seed of ``numpy.random.default_rng`` for the rating split; default 20260927 (the paper's).
    cache:
        Where the split is saved: ``True`` (default) uses the data folder when its permissions allow
        writing, else ``$XDG_CACHE_HOME/fullcomp`` (``~/.cache/fullcomp``); a path names the folder to
        use; ``False`` keeps the split in memory only.  A saved split is reused only when its rating
        count and checksum match the data, and recomputed otherwise.

    Returns
    -------
    RatingData
        Its ``label`` says which data set was read: ``"ml-100k"`` and ``"ml-1m"`` only when the rating,
        user and item counts are the published ones; the partial 1M file reads as ``"ml-1m-partial (users
        1-2999; not MovieLens-1M)"``.

    Raises
    ------
    DataError
        A file is missing (naming it and the supported layouts) or malformed (naming file and line).
    """
    ratings_file, users_file, layout = _locate(Path(path).expanduser(), users)
    text = _read_text(ratings_file)
    user_id, item_id, rating = _parse_ratings(text, ratings_file, layout)
    group_of = _parse_users(_read_text(users_file), users_file, layout)

    known = np.isin(user_id, group_of[0])
    if not known.all():
        k = int(np.argmax(~known))
        raise DataError(
            f"{ratings_file}, line {_line_number(text, k)}: user {user_id[k]} is not in the users file {users_file}"
        )

    user_ids, rows = np.unique(user_id, return_inverse=True)
    item_ids, cols = np.unique(item_id, return_inverse=True)
    P, Q = len(user_ids), len(item_ids)
    # Canonical (row, column) order makes the split independent of the order of lines in the file.
    key = rows.astype(np.int64) * Q + cols
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(key[order][1:] == key[order][:-1])
    if dup.size:
        a, b = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise DataError(
            f"{ratings_file}, lines {_line_number(text, a)} and {_line_number(text, b)}: user {user_id[a]} "
            f"rates item {item_id[a]} twice; a rating matrix has one rating per (user, item)"
        )
    rows, cols, rating = rows[order].astype(np.int64), cols[order].astype(np.int64), rating[order]
    user_groups = group_of[1][np.searchsorted(group_of[0], user_ids)]

    checksum = _checksum(user_ids[rows], item_ids[cols], rating)
    label = _label(layout, len(rating), user_ids, Q)
    # The file name carries the label's first word (ml-100k, ml-1m, ml-1m-partial), never a grander name.
    slug = label.split(" ")[0]
    labels, split_file, status = _split(len(rating), checksum, split_seed, cache, ratings_file, slug)
    return assemble(
        rows,
        cols,
        rating,
        user_groups,
        labels,
        shape=(P, Q),
        label=label,
        layout=layout,
        group_names=AGE_GROUP_NAMES,
        user_ids=user_ids.astype(np.int64),
        item_ids=item_ids.astype(np.int64),
        split_seed=split_seed,
        source=str(ratings_file),
        split_file=split_file,
        split_status=status,
    )


# ---- files ------------------------------------------------------------------------------------------


def _locate(path: Path, users: str | os.PathLike[str] | None) -> tuple[Path, Path, str]:
    """(ratings file, users file, layout) for a data folder or ratings file."""
    if not path.exists():
        raise DataError(f"MovieLens path {path} does not exist; expected a folder in the {LAYOUTS} layout")
    if path.is_file():
        ratings_file = path
        layout = _layout_of(path.name)
        if layout is None:
            raise DataError(f"{path} is not a MovieLens ratings file; supported layouts: {LAYOUTS}")
    else:
        present = [n for n in ("u.data", "ratings.dat", "ratings.dat.gz") if (path / n).is_file()]
        if not present:
            listing = ", ".join(sorted(p.name for p in path.iterdir())[:10]) or "nothing"
            raise DataError(
                f"no ratings file in {path} (it holds {listing}): expected u.data (MovieLens-100K) or "
                f"ratings.dat / ratings.dat.gz (MovieLens-1M); supported layouts: {LAYOUTS}"
            )
        if len(present) > 1:
            raise DataError(f"{path} holds several ratings files ({', '.join(present)}); pass the one to read as path")
        ratings_file = path / present[0]
        layout = _layout_of(present[0])
    users_name = "u.user" if layout == "ml-100k" else "users.dat"
    if users is None:
        users_file = ratings_file.parent / users_name
        hint = f"; pass users=PATH/{users_name} when it lives elsewhere"
    else:
        users_file = Path(users).expanduser()
        users_file = users_file / users_name if users_file.is_dir() else users_file
        hint = ""
    if not users_file.is_file():
        raise DataError(f"users file {users_file} is missing: {ratings_file.name} needs {users_name}{hint}")
    return ratings_file, users_file, layout


def _layout_of(name: str) -> str | None:
    if name == "u.data":
        return "ml-100k"
    if name in ("ratings.dat", "ratings.dat.gz"):
        return "ml-1m"
    return None


def _read_text(file: Path) -> str:
    """A file's text, gunzipped when it ends in .gz; latin-1 decodes every byte (MovieLens-1M is ISO-8859-1)."""
    try:
        if file.suffix == ".gz":
            with gzip.open(file, "rt", encoding="latin-1") as fh:
                return fh.read()
        return file.read_text(encoding="latin-1")
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"cannot read {file}: {exc}") from exc


def _lines(text: str) -> list[str]:
    # Split on newlines only: str.splitlines also breaks at U+0085, which latin-1 decodes from byte 0x85.
    return text.split("\n")


def _line_number(text: str, k: int) -> int:
    """1-based line number of the k-th (0-based) non-blank line."""
    seen = -1
    for lineno, line in enumerate(_lines(text), 1):
        if line.strip():
            seen += 1
            if seen == k:
                return lineno
    raise AssertionError(f"line index {k} beyond the file")  # pragma: no cover - callers pass parsed indices


def _show(line: str) -> str:
    line = line.rstrip("\r")
    return repr(line if len(line) <= 80 else line[:77] + "...")


def _parse_ratings(text: str, file: Path, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user IDs, item IDs, ratings) in file order.

    numpy's C parser reads well-formed files quickly; anything it rejects or any value out of range sends the
    file through the line-by-line parser, which is the authority on what is accepted and names the bad line.
    """
    if layout == "ml-1m":
        # "::" becomes one tab for the C parser; a tab already in the text would hide a malformed line.
        fast_text, delimiter = (None, None) if "\t" in text else (text.replace("::", "\t"), "\t")
    else:
        fast_text, delimiter = text, None  # u.data: tab-separated, fields never contain spaces
    if fast_text is not None:
        dtype = [("user", "i8"), ("item", "i8"), ("rating", "f8"), ("time", "i8")]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an empty file is reported below, not as a numpy warning
                table = np.loadtxt(io.StringIO(fast_text), dtype=dtype, delimiter=delimiter, comments=None, ndmin=1)
        except ValueError:
            table = None
        if table is not None and table.size:
            u, i, r = table["user"], table["item"], table["rating"]
            if u.min() >= 1 and i.min() >= 1 and np.all((r >= 1) & (r <= 5)):  # NaN fails the range test
                return u, i, r
    return _scan_ratings(text, file, layout)


def _scan_ratings(text: str, file: Path, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sep, what = ("::", "'::'") if layout == "ml-1m" else (None, "tab")
    users: list[int] = []
    items: list[int] = []
    ratings: list[float] = []
    for lineno, line in enumerate(_lines(text), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.strip().split(sep)]
        where = f"{file}, line {lineno}"
        if len(fields) != 4:
            raise DataError(
                f"{where}: expected 4 {what}-separated fields (user, item, rating, timestamp), "
                f"found {len(fields)}: {_show(line)}"
            )
        u = _positive_int(fields[0], "user ID", where, line)
        i = _positive_int(fields[1], "item ID", where, line)
        try:
            r = float(fields[2])
        except ValueError:
            raise DataError(f"{where}: rating {fields[2]!r} is not a number: {_show(line)}") from None
        if not 1 <= r <= 5:  # also rejects NaN
            raise DataError(f"{where}: rating {fields[2]} is outside the MovieLens scale 1-5: {_show(line)}")
        try:
            int(fields[3])
        except ValueError:
            raise DataError(f"{where}: timestamp {fields[3]!r} is not an integer: {_show(line)}") from None
        users.append(u)
        items.append(i)
        ratings.append(r)
    if not ratings:
        raise DataError(f"{file} holds no ratings")
    return np.array(users, dtype=np.int64), np.array(items, dtype=np.int64), np.array(ratings, dtype=np.float64)


def _positive_int(field: str, what: str, where: str, line: str) -> int:
    try:
        value = int(field)
    except ValueError:
        raise DataError(f"{where}: {what} {field!r} is not an integer: {_show(line)}") from None
    if value < 1:
        raise DataError(f"{where}: {what} {value} must be positive: {_show(line)}")
    return value


def _parse_users(text: str, file: Path, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted user IDs, their age groups 0..6) from u.user or users.dat."""
    if layout == "ml-100k":
        sep, what, age_field = "|", "'|'", 1
        fields_doc = "user|age|gender|occupation|zip"
    else:
        sep, what, age_field = "::", "'::'", 2
        fields_doc = "UserID::Gender::Age::Occupation::Zip"
    ids: list[int] = []
    groups: list[int] = []
    first_line: dict[int, int] = {}
    for lineno, line in enumerate(_lines(text), 1):
        if not line.strip():
            continue
        fields = line.strip().split(sep)
        where = f"{file}, line {lineno}"
        if len(fields) != 5:
            raise DataError(
                f"{where}: expected 5 {what}-separated fields ({fields_doc}), found {len(fields)}: {_show(line)}"
            )
        user = _positive_int(fields[0].strip(), "user ID", where, line)
        if user in first_line:
            raise DataError(f"{where}: user {user} is listed again (first on line {first_line[user]})")
        first_line[user] = lineno
        age_text = fields[age_field].strip()
        try:
            age = int(age_text)
        except ValueError:
            raise DataError(f"{where}: age {age_text!r} is not an integer: {_show(line)}") from None
        if layout == "ml-100k":
            if not 1 <= age <= 130:
                raise DataError(f"{where}: age {age} is not a plausible age in years: {_show(line)}")
            group = int(np.searchsorted(AGE_BOUNDS, age, side="right"))
        else:
            if age not in ML1M_AGE_CODES:
                codes = ", ".join(str(c) for c in ML1M_AGE_CODES)
                raise DataError(f"{where}: age code {age} is not a MovieLens-1M code ({codes}): {_show(line)}")
            group = ML1M_AGE_CODES[age]
        ids.append(user)
        groups.append(group)
    if not ids:
        raise DataError(f"{file} lists no users")
    ids_arr = np.array(ids, dtype=np.int64)
    order = np.argsort(ids_arr)
    return ids_arr[order], np.array(groups, dtype=np.int64)[order]


def _label(layout: str, n: int, user_ids: np.ndarray, n_items: int) -> str:
    """The honest name of what was read: the published name only when all counts match the published data."""
    counts = (n, len(user_ids), n_items)
    lo, hi = int(user_ids[0]), int(user_ids[-1])
    users = f"users {lo}-{hi}" if hi - lo + 1 == len(user_ids) else f"{len(user_ids)} users with IDs {lo}-{hi}"
    if layout == "ml-100k":
        if counts == ML100K_COUNTS:
            return "ml-100k"
        return f"ml-100k-layout ({n} ratings, {users}, {n_items} items; not MovieLens-100K)"
    if counts == ML1M_COUNTS:
        return "ml-1m"
    return f"ml-1m-partial ({users}; not MovieLens-1M)"


# ---- the saved split --------------------------------------------------------------------------------


def _checksum(user_ids: np.ndarray, item_ids: np.ndarray, ratings: np.ndarray) -> str:
    """SHA-256 of the ratings in canonical order: any change to who rated what, or how, changes it."""
    h = hashlib.sha256()
    for a in (user_ids.astype("<i8"), item_ids.astype("<i8"), ratings.astype("<f8")):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _split(
    n: int, checksum: str, seed: int, cache: bool | str | os.PathLike[str], ratings_file: Path, slug: str
) -> tuple[np.ndarray, Path | None, str]:
    """Split labels of the n ratings: read from a matching saved split, else computed and saved."""
    if cache is False:
        return split_assignment(n, seed), None, "not saved (cache=False)"
    name = f"split_{slug}_seed{seed}.npz"
    if cache is True:
        folders = [ratings_file.parent, _home_cache(ratings_file)]
        # The data folder is only used when its permissions grant writing: a read-only shared copy stays
        # untouched even for root, who could write it regardless.  A split already there is still read.
        writable = [f for f in folders if f != ratings_file.parent or _permits_writing(f)]
    else:
        folders = [Path(cache).expanduser()]
        writable = folders
    stale = []
    for folder in folders:
        file = folder / name
        if file.is_file():
            labels, why = _read_split(file, n, checksum, seed)
            if labels is not None:
                return labels, file, "reused"
            stale.append(f"{file} {why}")
    labels = split_assignment(n, seed)
    status = f"recomputed ({'; '.join(stale)})" if stale else "created"
    for folder in writable:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            file = folder / name
            _write_split(file, labels, n, checksum, seed)
            return labels, file, status
        except OSError:
            continue
    warnings.warn(
        f"could not save the rating split in {', '.join(str(f) for f in writable)}; it is recomputed from seed "
        f"{seed} at every load (pass cache=FOLDER to save it)",
        stacklevel=3,
    )
    return labels, None, f"not saved ({status}; no writable cache folder)"


def _home_cache(ratings_file: Path) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    # One folder per data location, so two copies of a data set never overwrite each other's split.
    tag = hashlib.sha1(str(ratings_file.resolve()).encode()).hexdigest()[:16]
    return base / "fullcomp" / "splits" / tag


def _permits_writing(folder: Path) -> bool:
    try:
        mode = folder.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) and os.access(folder, os.W_OK)


def _read_split(file: Path, n: int, checksum: str, seed: int) -> tuple[np.ndarray | None, str]:
    """(labels, "") when the file is a valid split of this data, else (None, why not)."""
    try:
        with np.load(file, allow_pickle=False) as z:
            fmt, n_saved = int(z["format"]), int(z["n_ratings"])
            sum_saved, seed_saved, labels = str(z["checksum"]), int(z["seed"]), z["labels"]
    except (OSError, KeyError, ValueError, zlib.error) as exc:
        return None, f"is unreadable ({type(exc).__name__})"
    if fmt != SPLIT_FORMAT:
        return None, f"has format {fmt}, not {SPLIT_FORMAT}"
    if n_saved != n:
        return None, f"is for {n_saved} ratings, the data has {n}"
    if sum_saved != checksum:
        return None, "has another checksum (the ratings changed)"
    if seed_saved != seed:
        return None, f"was made with seed {seed_saved}"
    if not valid_assignment(labels, n):
        return None, "does not hold an 80/10/10 split"
    return labels.astype(np.int8), ""


def _write_split(file: Path, labels: np.ndarray, n: int, checksum: str, seed: int) -> None:
    # Write then rename, so a concurrent reader sees either no file or a whole one.
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=file.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(
                fh,
                format=np.int64(SPLIT_FORMAT),
                n_ratings=np.int64(n),
                checksum=np.array(checksum),
                seed=np.int64(seed),
                labels=labels.astype(np.int8),
            )
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
