"""A test filesystem with its own URL scheme, as gs:// is on Dataflow: only Beam's FileSystems can reach it.

dpstest://PATH is stored under `UrlFileSystem.root` on the local disk (set by the `url_root` fixture).
Reads come back the way object stores serve them (gs://, s3://): a buffered stream over ranged reads
(`filesystemio.DownloaderStream`), not a local file object. Beam finds a filesystem by scheme among all
`FileSystem` subclasses and refuses a scheme defined twice, so every test module imports this one class
(and the `url_root` fixture) from here.
"""
import io
import os
import shutil

import pytest
from apache_beam.io.filesystem import CompressedFile, CompressionTypes, FileMetadata, FileSystem, MatchResult
from apache_beam.io.filesystemio import Downloader, DownloaderStream
from apache_beam.io.localfilesystem import LocalFileSystem

SCHEME = "dpstest"


class _RangeReads(Downloader):
    """Serves byte ranges of a local file, one open per request, like ranged GETs on an object store."""

    def __init__(self, path):
        self.path = path
        self._size = os.path.getsize(path)  # FileNotFoundError (an OSError) for a missing object

    @property
    def size(self):
        return self._size

    def get_range(self, start, end):
        with open(self.path, "rb") as handle:
            handle.seek(start)
            return handle.read(end - start)


class UrlFileSystem(LocalFileSystem):
    """dpstest://PATH stored under `root` on the local disk: a stand-in for gs:// that only FileSystems knows."""

    root = None
    disk = LocalFileSystem(None)

    @classmethod
    def scheme(cls):
        return SCHEME

    def _local(self, path):
        if self.root is None or not path.startswith(f"{SCHEME}://"):
            raise ValueError(f"not a {SCHEME} URL: {path!r}")
        return os.path.join(self.root, path[len(SCHEME) + 3:])

    def _url(self, local):
        return f"{SCHEME}://" + os.path.relpath(local, self.root)

    def join(self, base, *paths):
        return "/".join([base.rstrip("/"), *paths])

    def split(self, path):
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def create(self, path, *args, **kwargs):
        return self.disk.create(self._local(path), *args, **kwargs)

    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        stream = io.BufferedReader(DownloaderStream(_RangeReads(self._local(path))), buffer_size=1 << 16)
        compression = FileSystem._get_compression_type(path, compression_type)
        return stream if compression == CompressionTypes.UNCOMPRESSED else CompressedFile(stream, compression)

    def rename(self, sources, destinations):
        self.disk.rename([self._local(s) for s in sources], [self._local(d) for d in destinations])

    def exists(self, path):
        return self.disk.exists(self._local(path))

    def delete(self, paths):
        """As on gs://, a path ending in / deletes everything under that prefix."""
        for path in paths:
            if path.endswith("/"):
                shutil.rmtree(self._local(path))
            else:
                self.disk.delete([self._local(path)])

    def match(self, patterns, limits=None):
        results = self.disk.match([self._local(p) for p in patterns], limits)
        return [MatchResult(pattern, [FileMetadata(self._url(m.path), m.size_in_bytes, m.last_updated_in_seconds)
                                      for m in result.metadata_list])
                for pattern, result in zip(patterns, results)]


@pytest.fixture()
def url_root(tmp_path, monkeypatch):
    """The local directory behind dpstest://; dpstest://a/b is url_root / "a" / "b"."""
    root = tmp_path / "bucket"
    root.mkdir()
    monkeypatch.setattr(UrlFileSystem, "root", str(root))
    return root
