"""MNIST data for tutorial 5: the IDX file reader and the bundled stand-in data set.

IDX files (the MNIST distribution format) start with a big-endian header: a 32-bit
magic number — 2051 for images, 2049 for labels — then one 32-bit count per dimension
(images: count, rows, columns; labels: count), then the unsigned bytes. Files ending
in ``.gz`` are decompressed on the fly.

Without MNIST files, :func:`load_digits_as_mnist` turns scikit-learn's bundled digits
(1797 images of 8x8 pixels valued 0..16) into MNIST-shaped data: pixels rescaled to
0..255 (``round(v x 255 / 16)``) and each image resized to 28x28 by nearest-neighbour
sampling (output pixel ``i`` takes input pixel ``floor(i x 8 / 28)`` on both axes).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from ipusim.errors import IpusimError

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
MNIST_SIDE = 28

__all__ = [
    "IMAGES_MAGIC",
    "LABELS_MAGIC",
    "IdxFormatError",
    "load_digits_as_mnist",
    "read_idx_images",
    "read_idx_labels",
]


class IdxFormatError(IpusimError, ValueError):
    """An IDX file has the wrong magic number, a bad header or is truncated."""


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    p = Path(path)
    if not p.is_file():
        raise IdxFormatError(f"IDX file {str(p)!r} does not exist; hint: check --images/--labels")
    raw = p.read_bytes()
    return gzip.decompress(raw) if p.suffix == ".gz" else raw


def _read_idx(path: str | os.PathLike[str], magic: int, ndims: int, kind: str) -> np.ndarray:
    data = _read_bytes(path)
    header_len = 4 * (1 + ndims)
    if len(data) < 4:
        raise IdxFormatError(
            f"IDX {kind} file {str(path)!r} is truncated: {len(data)} bytes, not even the "
            f"4-byte magic number"
        )
    found = int(np.frombuffer(data[:4], dtype=">u4")[0])
    if found != magic:
        other = {IMAGES_MAGIC: "an images file", LABELS_MAGIC: "a labels file"}.get(
            found, "not an IDX file of unsigned bytes"
        )
        raise IdxFormatError(
            f"IDX {kind} file {str(path)!r} has magic number {found} (that is {other}); "
            f"{kind} files need {magic}; hint: are --images and --labels swapped?"
        )
    if len(data) < header_len:
        raise IdxFormatError(
            f"IDX {kind} file {str(path)!r} is truncated: {len(data)} bytes, the header alone "
            f"needs {header_len}"
        )
    words = np.frombuffer(data[:header_len], dtype=">u4").astype(np.int64)
    dims = [int(d) for d in words[1:]]
    need = int(np.prod(dims, dtype=np.int64))
    body = len(data) - header_len
    if body < need:
        raise IdxFormatError(
            f"IDX {kind} file {str(path)!r} is truncated: the header promises {need} bytes "
            f"of data (shape {dims}) but only {body} follow"
        )
    return np.frombuffer(data, dtype=np.uint8, count=need, offset=header_len).reshape(dims)


def read_idx_images(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX images file; return ``uint8[count, rows, cols]``.

    Raises
    ------
    IdxFormatError
        Missing file, magic number other than 2051, or fewer bytes than the header says.
    """
    return _read_idx(path, IMAGES_MAGIC, 3, "images")


def read_idx_labels(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX labels file; return ``uint8[count]``.

    Raises
    ------
    IdxFormatError
        Missing file, magic number other than 2049, or fewer bytes than the header says.
    """
    return _read_idx(path, LABELS_MAGIC, 1, "labels")


def load_digits_as_mnist() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as MNIST-like ``uint8[1797, 28, 28]`` images and labels
    (importing scikit-learn takes a second or two: a terminal shows a line meanwhile)."""
    from ipusim import progress

    with progress.activity("Loading the digits (scikit-learn)"):
        from sklearn.datasets import load_digits

        digits = load_digits()
    pixels = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    src = (np.arange(MNIST_SIDE) * digits.images.shape[1]) // MNIST_SIDE
    images = pixels[:, src][:, :, src]
    return np.ascontiguousarray(images), digits.target.astype(np.uint8)
