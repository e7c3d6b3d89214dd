"""Files through Apache Beam's `FileSystems`: one place for opening, writing, joining and removing paths.

A path may be local or any scheme the workers' Beam installation supports (`gs://` with `apache-beam[gcp]`,
`s3://`, `hdfs://`). A file is written under a temporary name in its directory and then renamed, so readers
never see half a file (atomic on local disks; on object stores the rename is a copy and a delete, and the final
name appears only once complete). Beam is imported when a file is first used, not when this module is.
"""
from __future__ import annotations

import os
import shutil
import uuid


def filesystems():
    """Apache Beam's `FileSystems`, imported on first use."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def open_file(path: str):
    """A binary, uncompressed read handle on a local file or URL."""
    from apache_beam.io.filesystem import CompressionTypes

    return filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def is_local(path: str) -> bool:
    """True for a path on this machine's disk (no URL scheme, or file://)."""
    return filesystems().get_scheme(path) in (None, "file")


def join(directory: str, *names: str) -> str:
    """DIRECTORY/NAME/... for a local path or a URL such as gs://bucket/dir."""
    return filesystems().join(directory, *names) if names else directory


def write_bytes(path: str, data: bytes) -> None:
    """Write `data` to `path` (local or a URL) under a temporary name in the same directory, then rename it."""
    from apache_beam.io.filesystem import CompressionTypes

    beam_files = filesystems()
    directory, name = beam_files.split(path)
    temporary = beam_files.join(directory, f".writing-{uuid.uuid4().hex}-{name}")
    try:
        with beam_files.create(temporary, compression_type=CompressionTypes.UNCOMPRESSED) as out:
            out.write(data)
        beam_files.rename([temporary], [path])
    except BaseException:
        if beam_files.exists(temporary):
            beam_files.delete([temporary])
        raise


def create_bytes(path: str, data: bytes) -> bool:
    """Write `data` to `path` only if nothing is there yet; False (nothing written) when it exists.

    Local files: written under a temporary name, then hard-linked to `path`, which fails atomically if `path`
    exists, so of two writers exactly one succeeds and a reader never sees a partial file. URLs: checked, then
    written as `write_bytes` does (object stores offer no create-only rename; callers that need exclusivity
    there hold a lease)."""
    if not is_local(path):
        if filesystems().exists(path):
            return False
        write_bytes(path, data)
        return True
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".writing-{uuid.uuid4().hex}-{name}")
    with open(temporary, "wb") as out:
        out.write(data)
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)


def write_private_bytes(path: str, data: bytes) -> None:
    """Write or replace `path` atomically, readable by its owner only when local (a URL: the bucket's rules)."""
    if not is_local(path):
        write_bytes(path, data)
        return
    directory, name = os.path.split(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    temporary = os.path.join(directory, f".writing-{uuid.uuid4().hex}-{name}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


def read_bytes(path: str) -> bytes:
    """The whole content of a local file or URL."""
    with open_file(path) as handle:
        return handle.read()


def remove_file(path: str) -> None:
    """Delete one file (local or a URL)."""
    filesystems().delete([path])



def remove_tree(directory: str) -> None:
    """Delete a local directory or everything under a URL prefix; absent is fine."""
    if is_local(directory):
        shutil.rmtree(directory, ignore_errors=True)
        return
    if filesystems().exists(directory) or filesystems().match([join(directory, "*")])[0].metadata_list:
        filesystems().delete([directory.rstrip("/") + "/"])  # object stores have no directories, only prefixes
