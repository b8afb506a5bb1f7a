"""Codelets: declaration checks, field checks, estimators and batched Numba execution.

Every kernel result is compared with numpy (or arithmetic written out here). Vertex
classes that need compiling are defined once at module level and reused, because each
new kernel costs Numba compile time.
"""

from __future__ import annotations

import types
import warnings

import numba
import numpy as np
import pytest
from codelets_common import ListSums, SumVertex

import poplar_api.codelet_compile as codelet_compile
from poplar_api.codelet import (
    FieldBatch,
    FieldSpec,
    InOut,
    Input,
    MultiVertex,
    Output,
    Vector,
    VectorList,
    Vertex,
    collect_codelets,
    execute,
    vertex_type,
)
from poplar_api.errors import CodeletError, GraphError, PoplarError, TypeMismatchError
from poplar_api.types import BOOL, FLOAT, HALF, INT

# ----------------------------------------------------------------- vertex classes


class DotProduct(Vertex):
    a = Input(Vector(FLOAT))
    b = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(a, b, out):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * b[i]
        out[0] = s


class AffineInPlace(Vertex):
    data = InOut(Vector(FLOAT))
    scale = Input(FLOAT)

    @staticmethod
    def compute(data, scale):  # returns nothing: counts as success
        for i in range(data.shape[0]):
            data[i] = data[i] * scale[0] + 1.0


class StridedScale(MultiVertex):
    data = InOut(Vector(FLOAT))
    visits = InOut(Vector(INT))

    @staticmethod
    def compute(worker_id, num_workers, data, visits):
        for i in range(worker_id, data.shape[0], num_workers):
            data[i] = data[i] * 3.0
        visits[worker_id] += 1
        return True


class WorkerVeto(MultiVertex):
    veto = Input(INT)

    @staticmethod
    def compute(worker_id, num_workers, veto):
        return worker_id != veto[0]


class HalfSum(Vertex):
    in_ = Input(Vector(HALF))
    out = Output(HALF)

    @staticmethod
    def compute(in_, out):
        s = np.float32(0.0)
        for i in range(in_.shape[0]):
            s += in_[i]
        out[0] = s


class CountAbove(Vertex):
    in_ = Input(Vector(INT))
    threshold = Input(INT)
    above = Output(Vector(BOOL))
    count = Output(INT)

    @staticmethod
    def compute(in_, threshold, above, count):
        n = 0
        for i in range(in_.shape[0]):
            hit = in_[i] > threshold[0]
            above[i] = hit
            if hit:
                n += 1
        count[0] = n


class AllPositive(Vertex):
    in_ = Input(Vector(FLOAT))

    @staticmethod
    def compute(in_):
        for i in range(in_.shape[0]):  # noqa: SIM110 (explicit loop: Numba kernel)
            if in_[i] <= 0.0:
                return False
        return True


_TABLE = np.arange(200_000, dtype=np.float64)  # large global: Numba cannot cache users


class TableLookup(Vertex):
    index = Input(INT)
    out = Output(FLOAT)

    @staticmethod
    def compute(index, out):
        out[0] = _TABLE[index[0]]


def vec_batch(per_vertex, element_type=FLOAT):
    return FieldBatch.pack(per_vertex, np.dtype(element_type.kernel_numpy))


# ----------------------------------------------------------------- declarations


def test_fields_resolved_in_declaration_order():
    vt = vertex_type(CountAbove)
    assert vt.name == "CountAbove"
    assert not vt.is_multi
    assert vt.field_names == ("in", "threshold", "above", "count")
    assert [f.direction for f in vt.fields] == ["in", "in", "out", "out"]
    assert [f.kind for f in vt.fields] == ["vector", "scalar", "vector", "scalar"]
    assert vt.field("above").element_type is BOOL
    assert vt.field("in").attribute == "in_"
    assert vertex_type(CountAbove) is vt  # cached
    assert vertex_type(StridedScale).is_multi
    assert vertex_type(ListSums).field("in").kind == "vectorlist"


def test_type_name_explicit_names_interleaved_and_inheritance():
    class Base(Vertex):
        in_ = Input(Vector(FLOAT), interleaved=True)

    class Child(Base):
        typeName = "popops::Child<float>"
        out = Output(FLOAT, name="result")

        @staticmethod
        def compute(in_, out):
            return True

    vt = vertex_type(Child)
    assert vt.name == "popops::Child<float>"
    assert vt.field_names == ("in", "result")
    assert vt.field("in").interleaved is True
    assert vt.field("result").interleaved is False
    assert vt.field("result").attribute == "out"


def test_unknown_field_lists_fields_and_suggests_closest():
    vt = vertex_type(SumVertex)
    with pytest.raises(GraphError) as info:
        vt.field("in_")
    msg = str(info.value)
    assert "'SumVertex'" in msg and "'in', 'out'" in msg and "did you mean 'in'" in msg


def _returns_true(_field):
    return True


#: Wrong codelet declarations: (class name, base class, class attributes, what the
#: error must say). Each class is made in the test with ``type(name, (base,), attrs)``.
DECLARATION_ERRORS = [
    ("NoCompute", Vertex, {"in_": Input(Vector(FLOAT))}, "has no compute"),
    (
        "PlainMethod",
        Vertex,
        {"in_": Input(Vector(FLOAT)), "compute": lambda self, in_: True},
        "must be a staticmethod",
    ),
    (
        "ClassMethod",
        Vertex,
        {"in_": Input(Vector(FLOAT)), "compute": classmethod(lambda cls, in_: True)},
        "must be a staticmethod",
    ),
    (
        "TooFew",
        Vertex,
        {"a": Input(Vector(FLOAT)), "b": Output(FLOAT), "compute": staticmethod(lambda a: True)},
        "needs 2 positional parameters",
    ),
    (
        "MultiNoWorker",
        MultiVertex,
        {"data": InOut(Vector(FLOAT)), "compute": staticmethod(_returns_true)},
        "compute(worker_id, num_workers, data)",
    ),
    (
        "VarArgs",
        Vertex,
        {"data": InOut(Vector(FLOAT)), "compute": staticmethod(lambda *args: True)},
        "needs 1 positional parameters",
    ),
    (
        "NoDirection",
        Vertex,
        {"values": Vector(FLOAT), "compute": staticmethod(_returns_true)},
        "field 'values'",
    ),
    ("BareType", Vertex, {"out": FLOAT, "compute": staticmethod(_returns_true)}, "Output(FLOAT)"),
    (
        "Duplicate",
        Vertex,
        {
            "in_": Input(Vector(FLOAT)),
            "other": Input(Vector(FLOAT), name="in"),
            "compute": staticmethod(lambda in_, other: True),
        },
        "'in_' and 'other' are both called 'in'",
    ),
    (
        "NumpyElement",
        Vertex,
        {"in_": Input(Vector(np.float32)), "compute": staticmethod(_returns_true)},
        "field 'in_'",
    ),
    (
        "StringElement",
        Vertex,
        {"out": Output("float"), "compute": staticmethod(_returns_true)},
        "'float'",
    ),
    (
        "ListOfInt",
        Vertex,
        {"in_": Input(VectorList(3)), "compute": staticmethod(_returns_true)},
        "field 'in_'",
    ),
    (
        "Interleaved",
        Vertex,
        {"in_": Input(Vector(FLOAT), interleaved="yes"), "compute": staticmethod(_returns_true)},
        "interleaved",
    ),
    (
        "BadName",
        Vertex,
        {"in_": Input(Vector(FLOAT), name="my field"), "compute": staticmethod(_returns_true)},
        "'my field'",
    ),
    (
        "EmptyName",
        Vertex,
        {"typeName": "", "in_": Input(Vector(FLOAT)), "compute": staticmethod(_returns_true)},
        "non-empty",
    ),
    (
        "PlainEstimator",
        Vertex,
        {
            "in_": Input(Vector(FLOAT)),
            "compute": staticmethod(_returns_true),
            "getCycleEstimate": lambda self, sizes, target: 1,
        },
        "getCycleEstimate must be a classmethod",
    ),
]


@pytest.mark.parametrize(
    ("name", "base", "attrs", "expected"),
    DECLARATION_ERRORS,
    ids=[row[0] for row in DECLARATION_ERRORS],
)
def test_declaration_errors_name_class_and_field(name, base, attrs, expected):
    cls = type(name, (base,), dict(attrs))
    with pytest.raises(CodeletError) as info:
        vertex_type(cls)
    msg = str(info.value)
    assert repr(cls.__name__) in msg
    assert expected in msg
    assert isinstance(info.value, PoplarError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("obj", [Vertex, MultiVertex, int, SumVertex()])
def test_non_codelets_rejected(obj):
    with pytest.raises(CodeletError, match="not a codelet"):
        vertex_type(obj)


# ----------------------------------------------------------------- FieldSpec.check


def test_field_check_accepts_matching_connections():
    vt = vertex_type(ListSums)
    vt.field("in").check([3, 0, 2], FLOAT, "vertex 0 (ListSums) field 'in'")
    vt.field("out").check(0, FLOAT, "vertex 0 (ListSums) field 'out'")
    vertex_type(SumVertex).field("out").check(1, FLOAT, "vertex 0 (SumVertex) field 'out'")


def test_field_check_type_mismatch():
    where = "vertex 3 (SumVertex) field 'in'"
    with pytest.raises(TypeMismatchError) as info:
        vertex_type(SumVertex).field("in").check(4, HALF, where)
    msg = str(info.value)
    assert where in msg and "half" in msg and "Input(Vector(FLOAT))" in msg
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize(
    ("cls", "field", "value", "expected"),
    [
        (SumVertex, "out", 3, "exactly 1 element"),
        (SumVertex, "out", 0, "exactly 1 element"),
        (SumVertex, "in", [2, 2], "needs a single tensor"),
        (ListSums, "in", 4, "needs a list of tensors"),
        (ListSums, "in", [2, -1], "non-negative"),
    ],
)
def test_field_check_size_errors_name_the_field(cls, field, value, expected):
    where = f"vertex 7 ({cls.__name__}) field '{field}'"
    with pytest.raises(GraphError) as info:
        vertex_type(cls).field(field).check(value, FLOAT, where)
    assert where in str(info.value) and expected in str(info.value)


def test_fieldspec_is_a_plain_value():
    spec = FieldSpec(name="x", direction="inout", kind="vector", element_type=INT)
    assert spec.kernel_dtype == np.dtype(np.int32)
    assert spec.writes
    assert FieldSpec("x", "in", "scalar", HALF).kernel_dtype == np.dtype(np.float32)


# ----------------------------------------------------------------- estimators


class Estimated(Vertex):
    in_ = Input(VectorList(FLOAT))
    weights = Input(Vector(FLOAT))
    out = Output(FLOAT)
    calls: list = []
    result = None

    @staticmethod
    def compute(in_, weights, out):
        return True

    @classmethod
    def getCycleEstimate(cls, sizes, target):
        cls.calls.append((sizes, target))
        if cls.result is not None:
            return cls.result
        return 10 + sum(sizes["in"]) + 2 * sizes["weights"] + sizes["out"]


def test_estimator_gets_sizes_and_target():
    Estimated.calls.clear()
    Estimated.result = None
    target = object()
    vt = vertex_type(Estimated)
    assert vt.has_estimator
    sizes = {"in": [3, 4], "weights": 5, "out": 1}
    assert vt.estimate(sizes, target) == 10 + (3 + 4) + 2 * 5 + 1
    assert Estimated.calls == [({"in": [3, 4], "weights": 5, "out": 1}, target)]
    assert Estimated.calls[0][1] is target


@pytest.mark.parametrize("bad", [-1, 2.5, "7", True])
def test_estimator_bad_results(bad):
    Estimated.result = bad
    try:
        with pytest.raises(CodeletError) as info:
            vertex_type(Estimated).estimate({"in": [], "weights": 0, "out": 1}, None)
    finally:
        Estimated.result = None
    assert "'Estimated'" in str(info.value) and repr(bad) in str(info.value)


def test_estimator_exception_and_missing_estimator():
    vt = vertex_type(Estimated)
    with pytest.raises(CodeletError, match="'Estimated': getCycleEstimate raised TypeError"):
        vt.estimate({"in": 5, "weights": 0, "out": 1}, None)  # sum(5) fails
    with pytest.raises(GraphError, match="weights"):
        vt.estimate({"in": [], "out": 1}, None)
    assert not vertex_type(SumVertex).has_estimator
    with pytest.raises(CodeletError, match="'SumVertex' has no getCycleEstimate"):
        vertex_type(SumVertex).estimate({"in": 3, "out": 1}, None)


# ----------------------------------------------------------------- execution


def test_sum_vertex_over_vertices_of_different_lengths():
    rng = np.random.default_rng(1)
    parts = [rng.standard_normal(4), rng.standard_normal(1), rng.standard_normal(7)]
    data = np.concatenate(parts).astype(np.float32)
    batches = {
        "in": FieldBatch(data=data, offsets=np.array([0, 4, 5, 12], dtype=np.int64)),
        "out": FieldBatch(data=np.zeros(3, np.float32), offsets=np.arange(4, dtype=np.int64)),
    }
    ok = execute(vertex_type(SumVertex), batches, 3)
    expected = [np.sum(p.astype(np.float32), dtype=np.float64) for p in parts]
    np.testing.assert_allclose(batches["out"].data, expected, rtol=1e-6)
    assert ok.dtype == np.bool_ and ok.tolist() == [True, True, True]
    execute(vertex_type(SumVertex), batches, 3, num_workers=1)
    # compiled once: one driver, with the kernel inside, serves every worker count
    driver = codelet_compile._driver(vertex_type(SumVertex), True, 6)
    assert codelet_compile._driver(vertex_type(SumVertex), True, 1) is driver
    assert len(driver.signatures) == 1 and codelet_compile._INLINED[driver]


class ObjectModeScale(Vertex):
    """A kernel Numba cannot compile into the driver loop (an object-mode block)."""

    in_ = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(in_, out):
        for i in range(in_.shape[0]):
            with numba.objmode(y="float64"):
                y = float(in_[i]) * 5.0
            out[i] = y
        return True


def test_kernel_that_cannot_be_inlined_is_called_from_the_driver():
    data = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    batches = {
        "in": FieldBatch(data=data, offsets=np.array([0, 1, 4], dtype=np.int64)),
        "out": FieldBatch(data=np.zeros(4, np.float32), offsets=np.array([0, 1, 4], np.int64)),
    }
    ok = execute(vertex_type(ObjectModeScale), batches, 2)
    assert ok.tolist() == [True, True]
    np.testing.assert_array_equal(batches["out"].data, data * 5)
    driver = codelet_compile._driver(vertex_type(ObjectModeScale), True, 6)
    assert not codelet_compile._INLINED[driver]


def test_dot_product_vertex():
    rows = [np.arange(5.0), np.linspace(-1, 1, 3), np.ones(8)]
    a = vec_batch(rows)
    b = vec_batch([r[::-1] * 2 for r in rows])
    out = vec_batch([0.0, 0.0, 0.0])
    execute(vertex_type(DotProduct), {"a": a, "b": b, "out": out}, 3)
    expected = [np.dot(r, r[::-1] * 2) for r in rows]
    np.testing.assert_allclose(out.data, expected, rtol=1e-6)


def test_inout_vertex_updates_in_place():
    data = vec_batch([[1.0, 2.0], [3.0, -4.0, 5.0]])
    before = data.data.copy()
    ok = execute(vertex_type(AffineInPlace), {"data": data, "scale": vec_batch([10.0, 0.5])}, 2)
    np.testing.assert_array_equal(data.data, before * np.array([10, 10, 0.5, 0.5, 0.5]) + 1)
    assert ok.all()  # compute returns nothing


@pytest.mark.parametrize("workers", [1, 4, 6])
def test_multivertex_strided_workers_result_independent_of_worker_count(workers):
    values = [np.arange(1.0, 12.0), np.arange(3.0), np.zeros(0)]
    data = vec_batch(values)
    visits = vec_batch([np.zeros(6)] * 3, INT)
    ok = execute(vertex_type(StridedScale), {"data": data, "visits": visits}, 3, workers)
    np.testing.assert_array_equal(data.data, np.concatenate(values) * 3.0)
    per_worker = [1] * workers + [0] * (6 - workers)  # each worker ran once per vertex
    assert visits.data.reshape(3, 6).tolist() == [per_worker] * 3
    assert ok.all()


def test_multivertex_fails_when_any_worker_fails():
    veto = vec_batch([-1, 3, 5], INT)  # with 4 workers, only worker 3 exists to veto
    ok = execute(vertex_type(WorkerVeto), {"veto": veto}, 3, num_workers=4)
    assert ok.tolist() == [True, False, True]


def test_vectorlist_vertex_sums_each_inner_vector():
    lists = [[[1.0, 2.0, 3.0], [4.0]], [], [[], [5.0, 6.5]]]
    batch = FieldBatch.pack_lists(lists, np.float32)
    assert batch.offsets.tolist() == [0, 2, 2, 4]
    assert batch.inner_offsets.tolist() == [0, 3, 4, 4, 6]
    out = vec_batch([np.zeros(2), np.zeros(0), np.zeros(2)])
    execute(vertex_type(ListSums), {"in": batch, "out": out}, 3)
    expected = [[1 + 2 + 3, 4], [], [0, 5 + 6.5]]
    assert [o.tolist() for o in out.unpack()] == expected


def test_half_fields_compute_in_float32_and_caller_rounds():
    values = np.array([2048.0, 1.0, 1.0], dtype=np.float16)
    # float32: 2048 + 1 + 1 = 2050, a float16 value. In float16 arithmetic 2048 + 1 = 2049
    # is halfway between 2048 and 2050 and rounds (to even) to 2048, so a float16
    # accumulation would end at 2048.
    naive = np.float16(0)
    for v in values:
        naive = np.float16(naive + v)
    assert naive == np.float16(2048)
    vt = vertex_type(HalfSum)
    data = vec_batch([values], HALF)
    assert data.data.dtype == np.float32
    out = vec_batch([0.0], HALF)
    execute(vt, {"in": data, "out": out}, 1)
    rounded = out.data.astype(np.float16)  # what the caller stores
    assert rounded[0] == np.float16(np.float32(2048) + np.float32(1) + np.float32(1))
    assert rounded[0] == np.float16(2050)
    with pytest.raises(TypeMismatchError, match="float32"):
        execute(vt, {"in": FieldBatch.pack([values], np.float16), "out": out}, 1)


def test_int_and_bool_fields():
    values = [np.array([5, -7, 2**31 - 1, 0]), np.array([-3, -2])]
    thresholds = [0, -3]
    batches = {
        "in": vec_batch(values, INT),
        "threshold": vec_batch(thresholds, INT),
        "above": vec_batch([np.zeros(4), np.zeros(2)], BOOL),
        "count": vec_batch([0, 0], INT),
    }
    execute(vertex_type(CountAbove), batches, 2)
    expected = [v > t for v, t in zip(values, thresholds, strict=True)]
    assert batches["above"].data.dtype == np.bool_
    np.testing.assert_array_equal(batches["above"].data, np.concatenate(expected))
    assert batches["count"].data.tolist() == [int(e.sum()) for e in expected]


def test_kernel_returning_false_marks_that_vertex():
    batch = vec_batch([[1.0, 2.0], [3.0, -1.0], []])
    ok = execute(vertex_type(AllPositive), {"in": batch}, 3)
    assert ok.tolist() == [True, False, True]


def test_zero_vertices_runs_nothing():
    batches = {"in": vec_batch([]), "out": vec_batch([])}
    assert execute(vertex_type(SumVertex), batches, 0).shape == (0,)


def test_uncacheable_kernels_run_without_warnings():
    source = (
        "class ExecDouble(Vertex):\n"
        "    data = InOut(Vector(FLOAT))\n"
        "    @staticmethod\n"
        "    def compute(data):\n"
        "        for i in range(data.shape[0]):\n"
        "            data[i] = 2.0 * data[i]\n"
    )
    namespace = {"Vertex": Vertex, "InOut": InOut, "Vector": Vector, "FLOAT": FLOAT}
    exec(source, namespace)  # no source file: Numba cannot cache this kernel
    data = vec_batch([[1.5, -2.0]])
    index = vec_batch([7, 199_999], INT)
    out = vec_batch([0.0, 0.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        execute(vertex_type(namespace["ExecDouble"]), {"data": data}, 1)
        execute(vertex_type(TableLookup), {"index": index, "out": out}, 2)
    assert data.data.tolist() == [3.0, -4.0]
    assert out.data.tolist() == [7.0, 199_999.0]  # _TABLE[i] == i
    assert [str(w.message) for w in caught] == []


# ----------------------------------------------------------------- compile/run errors


class WritesInput(Vertex):
    in_ = Input(Vector(FLOAT))

    @staticmethod
    def compute(in_):
        in_[0] = 1.0


class UnknownAttribute(Vertex):
    in_ = Input(Vector(FLOAT))

    @staticmethod
    def compute(in_):
        return in_.no_such_attribute > 0


class ReturnsFloat(Vertex):
    in_ = Input(Vector(FLOAT))

    @staticmethod
    def compute(in_):
        return in_[0]


class IntReciprocal(Vertex):
    in_ = Input(INT)
    out = Output(INT)

    @staticmethod
    def compute(in_, out):
        out[0] = 100 // in_[0]


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (WritesInput, "Input fields are read-only"),
        (UnknownAttribute, "no_such_attribute"),
        (ReturnsFloat, "must return True, False or nothing"),
    ],
)
def test_compile_errors_name_the_vertex_type(cls, expected):
    with pytest.raises(CodeletError) as info:
        execute(vertex_type(cls), {"in": vec_batch([[1.0, 2.0]])}, 1)
    msg = str(info.value)
    assert f"vertex type {cls.__name__!r}" in msg and "does not compile" in msg
    assert expected in msg
    assert len(msg.splitlines()) < 15  # the relevant lines, not Numba's whole report


def test_kernel_exception_becomes_codelet_error():
    batches = {"in": vec_batch([4, 0], INT), "out": vec_batch([0, 0], INT)}
    with pytest.raises(CodeletError, match="'IntReciprocal': compute raised ZeroDivisionError"):
        execute(vertex_type(IntReciprocal), batches, 2)


def test_batch_errors():
    vt = vertex_type(SumVertex)
    good_in, good_out = vec_batch([[1.0], [2.0, 3.0]]), vec_batch([0.0, 0.0])
    with pytest.raises(GraphError, match="fields are"):
        execute(vt, {"in": good_in}, 2)
    with pytest.raises(GraphError, match="'in' offsets: must be a 1-D integer array of length 4"):
        execute(vt, {"in": good_in, "out": good_out}, 3)
    two_each = vec_batch([[0.0, 0.0], [0.0, 0.0]])
    with pytest.raises(GraphError, match="exactly 1 element per vertex"):
        execute(vt, {"in": good_in, "out": two_each}, 2)
    past_end = FieldBatch(good_in.data, np.array([0, 1, 9]))
    with pytest.raises(GraphError, match=r"within \[0, 3\]"):
        execute(vt, {"in": past_end, "out": good_out}, 2)
    frozen = vec_batch([0.0, 0.0])
    frozen.data.flags.writeable = False
    with pytest.raises(GraphError, match="read-only"):
        execute(vt, {"in": good_in, "out": frozen}, 2)
    with pytest.raises(GraphError, match="num_workers"):
        execute(vt, {"in": good_in, "out": good_out}, 2, num_workers=0)
    with pytest.raises(GraphError, match="inner_offsets"):
        execute(vertex_type(ListSums), {"in": good_in, "out": good_out}, 2)


# ----------------------------------------------------------------- collect_codelets


def test_collect_codelets_from_classes_lists_and_modules():
    assert collect_codelets(SumVertex) == [SumVertex]
    assert collect_codelets([SumVertex, DotProduct, SumVertex]) == [SumVertex, DotProduct]
    module = types.ModuleType("user_codelets")
    module.__dict__.update(Vertex=Vertex, Input=Input, Vector=Vector, FLOAT=FLOAT)
    module.SumVertex = SumVertex  # imported, not defined here: skipped
    exec(
        "class _Base(Vertex):\n"
        "    in_ = Input(Vector(FLOAT))\n"
        "class First(_Base):\n"
        "    pass\n"
        "class Second(Vertex):\n"
        "    pass\n",
        module.__dict__,
    )
    assert [c.__name__ for c in collect_codelets(module)] == ["First", "Second"]
    assert collect_codelets([module, DotProduct])[-1] is DotProduct


@pytest.mark.parametrize("obj", [42, "SumVertex", Vertex, [SumVertex, 3], types.ModuleType("x")])
def test_collect_codelets_errors(obj):
    with pytest.raises(CodeletError, match="hint"):
        collect_codelets(obj)


# ------------------------------------------------------- vectorised library vertices


class _ScaleByTwoBatch(Vertex):
    """A library-style vertex: one numpy call for every vertex of the type."""

    src = Input(Vector(FLOAT))
    dst = Output(Vector(FLOAT))

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        batches["dst"].data[:] = 2 * batches["src"].data


def test_compute_batch_runs_without_numba():
    vt = vertex_type(_ScaleByTwoBatch)
    assert vt.kernel is None
    src = FieldBatch.pack([[1.0, 2.0], [3.0]], np.float32)
    dst = FieldBatch.pack([[0.0, 0.0], [0.0]], np.float32)
    ok = execute(vt, {"src": src, "dst": dst}, 2)
    np.testing.assert_array_equal(dst.data, [2.0, 4.0, 6.0])
    assert ok.tolist() == [True, True]


def test_compute_batch_must_be_a_classmethod():
    class Bad(Vertex):
        x = Input(FLOAT)

        def computeBatch(self, batches, n, w):  # not a classmethod
            pass

    with pytest.raises(CodeletError, match="computeBatch must be a classmethod"):
        vertex_type(Bad)


def test_kernels_of_aliased_or_main_modules_are_not_cached_on_disk(tmp_path):
    # a file loaded under an alias must not leave a disk cache that a later
    # `python file.py` (module __main__) would load and fail on
    import subprocess
    import sys

    src = tmp_path / "kern.py"
    src.write_text(
        "from poplar_api.codelet import Vertex, Input, Output, Vector, vertex_type\n"
        "from poplar_api.types import FLOAT\n"
        "class K(Vertex):\n"
        "    a = Input(Vector(FLOAT))\n"
        "    b = Output(FLOAT)\n"
        "    @staticmethod\n"
        "    def compute(a, b):\n"
        "        b[0] = a[0]\n"
        "if __name__ == '__main__':\n"
        "    print(vertex_type(K).kernel._cache.__class__.__name__)\n"
    )
    load_alias = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('alias_kern', {str(src)!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['alias_kern'] = m\n"
        "spec.loader.exec_module(m)\n"
        "from poplar_api.codelet import vertex_type\n"
        "print(vertex_type(m.K).kernel._cache.__class__.__name__)\n"
    )
    alias = subprocess.run([sys.executable, "-c", load_alias], capture_output=True, text=True)
    main = subprocess.run([sys.executable, str(src)], capture_output=True, text=True)
    assert alias.returncode == 0, alias.stderr
    assert main.returncode == 0, main.stderr
    # Numba's no-op cache for both: nothing was written next to the file
    assert alias.stdout.strip() == main.stdout.strip() == "NullCache"
    assert not (tmp_path / "__pycache__").exists() or not any(
        p.suffix in (".nbi", ".nbc") for p in (tmp_path / "__pycache__").iterdir()
    )


def test_kernels_of_importable_modules_are_cached_on_disk():
    # this test module is importable under its own name (pytest puts tests/ on the path)
    assert vertex_type(SumVertex).kernel._cache.__class__.__name__ == "FunctionCache"


def test_codelet_names_keep_their_import_path():
    # users and the lowering import everything from poplar_api.codelet, wherever it lives
    import poplar_api.codelet as public
    import poplar_api.codelet_base as base

    assert public.execute is codelet_compile.execute
    assert public.execute_lowered is codelet_compile.execute_lowered
    assert public.InPlaceField is codelet_compile.InPlaceField
    for name in ("Vertex", "MultiVertex", "VertexError", "VertexType", "checking_bounds"):
        assert getattr(public, name) is getattr(base, name)
    assert [n for n in public.__all__ if not hasattr(public, n)] == []
