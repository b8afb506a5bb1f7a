"""Lowerings and gradients of ONNX's elementwise-math, reduction and shape ops."""

from __future__ import annotations
