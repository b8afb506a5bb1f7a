"""The IDX reader of tutorial 5 on small files written here: good, wrong magic, truncated."""

from __future__ import annotations

import gzip
import importlib.util
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from ipusim.errors import IpusimError

TUTORIALS = Path(__file__).resolve().parents[1] / "examples" / "tutorials"


def _load_mnist():
    """Import examples/tutorials/mnist.py as the module ``mnist`` (tut5 imports it so)."""
    if "mnist" in sys.modules:
        return sys.modules["mnist"]
    spec = importlib.util.spec_from_file_location("mnist", TUTORIALS / "mnist.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mnist"] = module
    spec.loader.exec_module(module)
    return module


mnist = _load_mnist()


def write_idx(path, magic, dims, payload: bytes) -> None:
    """Big-endian header: magic, then one 32-bit count per dimension, then the bytes."""
    path.write_bytes(struct.pack(f">{1 + len(dims)}I", magic, *dims) + payload)


def test_reads_images_and_labels(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    labels = np.array([7, 1], np.uint8)
    write_idx(tmp_path / "img.idx", 2051, (2, 3, 4), images.tobytes())
    write_idx(tmp_path / "lab.idx", 2049, (2,), labels.tobytes())
    np.testing.assert_array_equal(mnist.read_idx_images(tmp_path / "img.idx"), images)
    np.testing.assert_array_equal(mnist.read_idx_labels(tmp_path / "lab.idx"), labels)


def test_reads_gzipped_files(tmp_path):
    labels = np.array([3, 0, 9], np.uint8)
    raw = struct.pack(">2I", 2049, 3) + labels.tobytes()
    (tmp_path / "lab.idx.gz").write_bytes(gzip.compress(raw))
    np.testing.assert_array_equal(mnist.read_idx_labels(tmp_path / "lab.idx.gz"), labels)


def test_wrong_magic_names_the_file_and_both_numbers(tmp_path):
    write_idx(tmp_path / "lab.idx", 2049, (2,), b"\x01\x02")
    with pytest.raises(mnist.IdxFormatError, match=r"magic number 2049 .*need 2051") as info:
        mnist.read_idx_images(tmp_path / "lab.idx")
    assert "lab.idx" in str(info.value)
    assert isinstance(info.value, IpusimError) and isinstance(info.value, ValueError)
    write_idx(tmp_path / "junk.idx", 1234, (1,), b"\x00")
    with pytest.raises(mnist.IdxFormatError, match="magic number 1234"):
        mnist.read_idx_labels(tmp_path / "junk.idx")


def test_truncated_files_are_reported(tmp_path):
    # header says 2 x 3 x 4 = 24 bytes of pixels, only 20 follow
    write_idx(tmp_path / "img.idx", 2051, (2, 3, 4), bytes(20))
    with pytest.raises(mnist.IdxFormatError, match=r"promises 24 bytes .* only 20 follow"):
        mnist.read_idx_images(tmp_path / "img.idx")
    (tmp_path / "short.idx").write_bytes(struct.pack(">I", 2049))  # no count word
    with pytest.raises(mnist.IdxFormatError, match="truncated: 4 bytes, the header alone needs 8"):
        mnist.read_idx_labels(tmp_path / "short.idx")
    with pytest.raises(mnist.IdxFormatError, match="does not exist"):
        mnist.read_idx_labels(tmp_path / "missing.idx")


def test_bundled_digits_become_mnist_shaped():
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, labels = mnist.load_digits_as_mnist()
    assert images.shape == (1797, 28, 28) and images.dtype == np.uint8
    np.testing.assert_array_equal(labels, digits.target)
    # pixel 16 -> 255; nearest neighbour: output (27, 27) samples input (27*8//28 = 7, 7)
    assert images.max() == 255
    assert images[5, 27, 27] == round(digits.images[5, 7, 7] * 255 / 16)
    assert images[5, 10, 3] == round(digits.images[5, 10 * 8 // 28, 3 * 8 // 28] * 255 / 16)
