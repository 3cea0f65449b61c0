"""Segments in a local directory (the embedded default)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from ..errors import InvalidInputError, StorageUnavailableError
from .base import ObjectData, ObjectInfo, ObjectNotFoundError

_TMP = ".tmp-"


class LocalObjectStore:
    """Objects as files under ``root``. A write goes to a temporary file that is fsynced
    and renamed into place, so no reader ever sees a partial object, and a file is never
    written again once it is in place: ``get_buffer`` returns a read-only memory map of
    it. A mapped file that gc deletes stays readable through the map until it is dropped
    (POSIX unlink semantics)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.url = self.root.as_uri()
        self._prefix = f"{self.root}{os.sep}"
        #: directories this store created or found (a partition's directory is made once,
        #: not at every put); one that was removed since is made again when a write fails
        self._directories: set[str] = set()

    def options(self) -> dict[str, str]:
        """A directory needs no options."""
        return {}

    def _file(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise InvalidInputError(f"invalid object key {key!r}")
        return self._prefix + key

    def _path(self, key: str) -> Path:
        return Path(self._file(key))

    def put(self, key: str, data: ObjectData) -> None:
        with self.writer(key) as sink:
            sink.write(data)

    @contextmanager
    def writer(self, key: str) -> Iterator[pa.NativeFile]:
        """The object's temporary file, opened for writing in its directory; on a clean
        exit fsynced, closed and renamed into place (a reader sees the whole object or
        none), on an exception closed and removed."""
        path = self._file(key)
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f"{_TMP}{uuid.uuid4().hex}-{name}")
        try:
            sink = self._open(directory, tmp)
        except OSError as error:
            raise StorageUnavailableError(f"cannot write {path}: {error.strerror or error}") from error
        try:
            with sink:
                yield sink
                os.fsync(sink.fileno())  # durable before it is visible under its key
            os.replace(tmp, path)
        except BaseException as error:
            try:
                os.unlink(tmp)
            except OSError:  # the directory itself is the problem
                pass
            if isinstance(error, OSError):
                raise StorageUnavailableError(f"cannot write {path}: {error.strerror or error}") from error
            raise

    def _open(self, directory: str, tmp: str) -> pa.NativeFile:
        """``tmp`` opened for writing, its directory made first if this store has not made
        or seen it, or if it was removed since."""
        if directory not in self._directories:
            os.makedirs(directory, exist_ok=True)
            self._directories.add(directory)
        try:
            return pa.OSFile(tmp, "wb")
        except FileNotFoundError:
            os.makedirs(directory, exist_ok=True)
            return pa.OSFile(tmp, "wb")

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectNotFoundError(f"object {key} not found in {self.url}") from None
        except OSError as error:
            raise StorageUnavailableError(f"cannot read {key}: {error.strerror}") from error

    def get_buffer(self, key: str) -> pa.Buffer:
        """A read-only memory map of the object's file: no copy, and pages come from the
        page cache as they are read."""
        path = self._file(key)
        try:
            with pa.memory_map(path, "r") as mapped:
                return mapped.read_buffer()  # keeps the mapping alive after the file closes
        except FileNotFoundError:
            raise ObjectNotFoundError(f"object {key} not found in {self.url}") from None
        except OSError as error:
            raise StorageUnavailableError(f"cannot read {key}: {error.strerror or error}") from error

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except FileNotFoundError:
            return None
        return ObjectInfo(key, st.st_size, int(st.st_mtime * 1000))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        # walk only the directory the prefix names, not the whole store
        top = self.root.joinpath(*prefix.split("/")[:-1]) if "/" in prefix else self.root
        if ".." in prefix.split("/") or not top.is_dir():
            return
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                path = Path(dirpath) / name
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix):
                    continue
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                yield ObjectInfo(key, st.st_size, int(st.st_mtime * 1000))

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                self._path(key).unlink(missing_ok=True)
            except OSError as error:
                raise StorageUnavailableError(f"cannot delete {key}: {error.strerror}") from error
