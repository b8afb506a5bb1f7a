"""ResNet-18 and ResNet-50 (He et al., 2015) as ONNX models built with ``onnx.helper``.

The torchvision layout: a 7x7/2 stem convolution with batch normalisation and ReLU,
a 3x3/2 max pool, four stages of basic (ResNet-18: two 3x3 convolutions) or
bottleneck (ResNet-50: 1x1, 3x3, 1x1 with 4x expansion) blocks, the first block of
stages 2-4 striding by 2 and projecting its shortcut with a 1x1 convolution, then a
global average pool and a fully connected layer. Every convolution has no bias and is
followed by BatchNormalization (inference form, running statistics as initializers).

``width`` scales the channels and ``blocks`` the depth, so the tests can run the same
graph structure small. For training, the model also takes a one-hot ``labels`` input
and outputs the cross-entropy ``loss = -mean(sum(labels · log_softmax(logits)))``,
plain ONNX ops only, so ``onnx.reference`` evaluates it as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["RESNET18", "RESNET50", "RESNET_TINY", "ResNetConfig", "build_resnet"]

#: Opset 15: BatchNormalization-15's inference form (``onnx.reference`` evaluates the
#: opset 9-13 node with batch statistics whenever ``momentum`` has its default).
OPSET = 15


@dataclass(frozen=True)
class ResNetConfig:
    """Shape of a ResNet.

    Attributes
    ----------
    blocks
        Blocks per stage (ResNet-18: 2, 2, 2, 2; ResNet-50: 3, 4, 6, 3).
    bottleneck
        Bottleneck blocks (ResNet-50) instead of basic ones (ResNet-18).
    width
        Channels of the stem and the first stage (64 in both).
    image, classes, batch
        Input side, classes of the classifier, batch size.
    """

    blocks: tuple[int, ...] = (2, 2, 2, 2)
    bottleneck: bool = False
    width: int = 64
    image: int = 224
    classes: int = 1000
    batch: int = 1

    @property
    def name(self) -> str:
        """``resnet18``, ``resnet50`` or a description of a scaled model."""
        if self == RESNET18:
            return "resnet18"
        if self == RESNET50:
            return "resnet50"
        kind = "bottleneck" if self.bottleneck else "basic"
        return f"resnet-{kind}-{'-'.join(map(str, self.blocks))}-w{self.width}-{self.image}px"


RESNET18 = ResNetConfig()
RESNET50 = ResNetConfig(blocks=(3, 4, 6, 3), bottleneck=True)
#: The ResNet-18 structure at 1/8 of the width, on 32x32 images with 10 classes.
RESNET_TINY = ResNetConfig(width=8, image=32, classes=10)


@dataclass
class ResNetModel:
    """A ResNet ModelProto and the names a session needs.

    Attributes
    ----------
    proto
        The ONNX model.
    x, logits, labels, loss
        Image input ``[batch, 3, image, image]``, classifier output, one-hot labels
        input and scalar loss (the last two None without ``loss``).
    """

    proto: onnx.ModelProto
    x: str
    logits: str
    labels: str | None
    loss: str | None


def build_resnet(cfg: ResNetConfig, seed: int = 0, loss: bool = False) -> ResNetModel:
    """A ResNet of shape ``cfg`` with random weights drawn from ``seed``.

    Convolution weights are He-normal; batch-norm scales near 1, shifts and running
    means small, running variances near 1, so activations keep their scale through
    the depth.
    """
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    counter = [0]

    def fresh(kind: str) -> str:
        counter[0] += 1
        return f"{kind}{counter[0]}"

    def init(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def init_int(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], **attrs) -> str:
        out = fresh(op.lower())
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv_bn(x: str, c_in: int, c_out: int, k: int, stride: int, relu: bool) -> str:
        w = init(fresh("w"), rng.standard_normal((c_out, c_in, k, k)) * np.sqrt(2 / (c_in * k * k)))
        y = node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                 pads=[k // 2] * 4)  # fmt: skip
        bn = [
            init(fresh("bn_scale"), 1 + 0.05 * rng.standard_normal(c_out)),
            init(fresh("bn_shift"), 0.05 * rng.standard_normal(c_out)),
            init(fresh("bn_mean"), 0.05 * rng.standard_normal(c_out)),
            init(fresh("bn_var"), 1 + 0.1 * rng.random(c_out)),
        ]
        y = node("BatchNormalization", [y, *bn], epsilon=1e-5)
        return node("Relu", [y]) if relu else y

    def block(x: str, c_in: int, c: int, stride: int) -> tuple[str, int]:
        if cfg.bottleneck:
            c_out = 4 * c
            y = conv_bn(x, c_in, c, 1, 1, True)
            y = conv_bn(y, c, c, 3, stride, True)
            y = conv_bn(y, c, c_out, 1, 1, False)
        else:
            c_out = c
            y = conv_bn(x, c_in, c, 3, stride, True)
            y = conv_bn(y, c, c, 3, 1, False)
        short = x if (stride == 1 and c_in == c_out) else conv_bn(x, c_in, c_out, 1, stride, False)
        return node("Relu", [node("Add", [y, short])]), c_out

    x = "image"
    y = conv_bn(x, 3, cfg.width, 7, 2, True)
    y = node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = cfg.width
    for stage, count in enumerate(cfg.blocks):
        c = cfg.width * 2**stage
        for i in range(count):
            y, channels = block(y, channels, c, 2 if (i == 0 and stage > 0) else 1)
    y = node("Flatten", [node("GlobalAveragePool", [y])], axis=1)
    fc_w = init("fc.weight", rng.standard_normal((channels, cfg.classes)) / np.sqrt(channels))
    fc_b = init("fc.bias", 0.01 * rng.standard_normal(cfg.classes))
    logits = node("Add", [node("MatMul", [y, fc_w]), fc_b])

    b = cfg.batch
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, 3, cfg.image, cfg.image])]
    outputs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [b, cfg.classes])]
    labels = loss_name = None
    if loss:
        labels = "labels"
        inputs.append(helper.make_tensor_value_info(labels, TensorProto.FLOAT, [b, cfg.classes]))
        logp = node("LogSoftmax", [logits], axis=-1)
        axes = init_int("sum_axes", np.array([1], np.int64))
        picked = node("ReduceSum", [node("Mul", [logp, labels]), axes], keepdims=0)
        loss_name = node("Neg", [node("ReduceMean", [picked], keepdims=0)])
        outputs.append(helper.make_tensor_value_info(loss_name, TensorProto.FLOAT, []))
    graph = helper.make_graph(nodes, cfg.name, inputs, outputs, initializer=inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(proto)
    return ResNetModel(proto, x, logits, labels, loss_name)
