#!/usr/bin/python3
"""Writes the ONNX models of the importer's tests into the folder given (one .onnx per case).

Run by tests/onnx/onnx_import_test.cpp with Debian's /usr/bin/python3 (python3-onnx). Every
model is built with onnx.helper and passes onnx.checker; the error cases are well-formed
ONNX that the engine cannot run. Weights are seeded, so the files are the same every run.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
RNG = np.random.default_rng(7)


def init(name, *shape, dtype=np.float32):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(dtype), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def save(name, nodes, inputs, output, inits=(), opset=13, out_shape=("N", "F")):
    graph = helper.make_graph(
        nodes, name, inputs,
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_shape))], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name + ".onnx"))


def image(name="x", c=3, h=8, w=8, batch="N"):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, c, h, w])


def node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or outputs[0], **attrs)


# Every supported operator in one DAG (fan-out, ADD and CONCAT joins), ending in Softmax.
save("all_ops", [
    node("Conv", ["x", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1]),
    node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], epsilon=1e-3,
         momentum=0.8),
    node("Relu", ["bn"], ["r1"]),
    node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
    node("Conv", ["p1", "c2_w"], ["c2"], group=2, dilations=[2, 2], pads=[2, 2, 2, 2]),
    node("Tanh", ["c2"], ["t2"]),
    node("LRN", ["t2"], ["l2"], size=3, alpha=2e-4, beta=0.7, bias=1.5),
    node("Identity", ["p1"], ["id"]),
    node("Add", ["l2", "id"], ["sum"]),
    node("Concat", ["sum", "p1"], ["cat"], axis=1),
    node("AveragePool", ["cat"], ["ap"], kernel_shape=[3, 3], strides=[1, 1],
         pads=[1, 1, 1, 1], count_include_pad=1),
    node("Flatten", ["ap"], ["flat"]),
    node("Gemm", ["flat", "fc1_w", "fc1_b"], ["fc1"], transB=1),
    node("Dropout", ["fc1", "drop_ratio"], ["drop"]),
    node("Relu", ["drop"], ["r2"]),
    node("MatMul", ["r2", "fc2_w"], ["mm"]),
    node("Add", ["mm", "fc2_b"], ["fc2"], name="fc2_bias"),
    node("Softmax", ["fc2"], ["prob"], axis=1),
], [image()], "prob", [
    init("c1_w", 4, 3, 3, 3), init("c1_b", 4),
    numpy_helper.from_array(RNG.uniform(0.5, 1.5, 4).astype(np.float32), "bn_s"),
    init("bn_b", 4), init("bn_m", 4),
    numpy_helper.from_array(RNG.uniform(0.5, 2, 4).astype(np.float32), "bn_v"),
    init("c2_w", 4, 2, 3, 3), init("fc1_w", 5, 8 * 4 * 4), init("fc1_b", 5),
    numpy_helper.from_array(np.array(0.25, dtype=np.float32), "drop_ratio"),
    init("fc2_w", 5, 3), init("fc2_b", 3),
])

# Gemm with transB = 0, alpha, beta and a one-value bias; no Softmax (one is appended).
save("gemm", [node("Gemm", ["x", "w", "c"], ["y"], alpha=2.0, beta=0.5)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y",
     [init("w", 6, 4), init("c", 1)])

# 1-D convolution and pooling, a global pool, Reshape by a Constant node, SAME padding.
save("conv1d", [
    node("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", kernel_shape=[3]),
    node("MaxPool", ["c"], ["p"], kernel_shape=[2], strides=[2]),
    node("GlobalMaxPool", ["p"], ["g"]),
    node("Sigmoid", ["g"], ["s"]),
    node("Constant", [], ["shape"], value=ints("shape_value", [0, -1])),
    node("Reshape", ["s", "shape"], ["flat"]),
    node("Gemm", ["flat", "fc_w"], ["y"], transB=1),
], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 10])], "y",
    [init("w", 3, 2, 3), init("fc_w", 4, 3)])

# A fixed batch of 2 in the file, global average pooling.
save("fixed_batch", [
    node("GlobalAveragePool", ["x"], ["g"]),
    node("Flatten", ["g"], ["f"]),
    node("Gemm", ["f", "w", "b"], ["y"], transB=1),
], [image(c=3, h=4, w=4, batch=2)], "y", [init("w", 5, 3), init("b", 5)])


# ---- cases in the ONNX backend test-data layout, expected outputs computed with numpy ----
def case(name, nodes, x, output, inits, expected):
    folder = os.path.join(OUT, name)
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"] + list(x.shape[1:]))],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(expected.shape))],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for kind, value in (("input", x), ("output", expected)):
        with open(os.path.join(folder, "test_data_set_0", kind + "_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(value.astype(np.float32)).SerializeToString())


# ADD and CONCAT joins of computed tensors (the backend data's Add/Concat cases have two inputs).
x = RNG.standard_normal((2, 2, 3, 3)).astype(np.float32)
relu, tanh = np.maximum(x, 0), np.tanh(x)
case("case_add_concat", [
    node("Relu", ["x"], ["a"]), node("Tanh", ["x"], ["b"]), node("Add", ["a", "b"], ["s"]),
    node("Concat", ["s", "a", "b"], ["c"], axis=1),
], x, "c", {}, np.concatenate([relu + tanh, relu, tanh], axis=1))

# MatMul + Add (one FC), then Gemm with transB = 0, alpha, beta and a one-value bias, Softmax.
x = RNG.standard_normal((3, 6)).astype(np.float32)
w1, b1 = init("w1", 6, 4), init("b1", 4)
w2, c2 = init("w2", 4, 5), init("c2", 1)
arrays = {t.name: numpy_helper.to_array(t) for t in (w1, b1, w2, c2)}
h = np.maximum(x @ arrays["w1"] + arrays["b1"], 0)
logits = 2.0 * (h @ arrays["w2"]) + 0.5 * arrays["c2"]
e = np.exp(logits - logits.max(axis=1, keepdims=True))
case("case_fc", [
    node("MatMul", ["x", "w1"], ["m"]), node("Add", ["m", "b1"], ["fc1"]),
    node("Relu", ["fc1"], ["r"]), node("Gemm", ["r", "w2", "c2"], ["fc2"], alpha=2.0, beta=0.5),
    node("Softmax", ["fc2"], ["p"], axis=1),
], x, "p", arrays, e / e.sum(axis=1, keepdims=True))


# ---- models the engine cannot run: each is an error naming the node ----
def one_conv(name, extra_nodes, out, inits=(), opset=13, **conv_attrs):
    save(name, [node("Conv", ["x", "w"], ["c"], **conv_attrs)] + extra_nodes, [image()], out,
         [init("w", 2, 3, 3, 3)] + list(inits), opset=opset)


one_conv("err_leaky_relu", [node("LeakyRelu", ["c"], ["s"])], "s")
one_conv("err_asymmetric_pads", [], "c", pads=[0, 0, 1, 1])
one_conv("err_count_exclude_pad",
         [node("AveragePool", ["c"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], "p")
one_conv("err_ceil_mode", [node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], ceil_mode=1)], "p")
one_conv("err_softmax_inside",
         [node("Softmax", ["c"], ["s"], axis=1), node("Relu", ["s"], ["r"])], "r", opset=11)
one_conv("err_add_constant", [node("Add", ["c", "k"], ["a"])], "a", [init("k", 1, 2, 1, 1)])
one_conv("err_concat_axis", [node("Concat", ["c", "c"], ["k"], axis=2)], "k")
one_conv("err_lrn_even", [node("LRN", ["c"], ["l"], size=4)], "l")
one_conv("err_bn_training", [
    node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], training_mode=1)], "bn",
    [init("s", 2), init("b", 2), init("m", 2), init("v", 2)], opset=15)
one_conv("err_reshape", [node("Reshape", ["c", "shape"], ["r"])], "r", [ints("shape", [0, 2, -1])])
one_conv("err_flatten_then_bn", [
    node("Flatten", ["c"], ["f"]),
    node("BatchNormalization", ["f", "s", "b", "m", "v"], ["bn"])], "bn",
    [init("s", 72), init("b", 72), init("m", 72), init("v", 72)])
save("err_gemm_trans_a", [node("Gemm", ["x", "w"], ["y"], transA=1)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])], "y", [init("w", 4, 3)])
save("err_two_inputs", [node("Add", ["x", "z"], ["y"])], [image(), image("z")], "y")
save("err_int_input", [node("Relu", ["x"], ["y"])],
     [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", 4])], "y")
save("err_conv3d", [node("Conv", ["x", "w"], ["c"])],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 4, 4, 4])], "c",
     [init("w", 2, 1, 3, 3, 3)])
save("err_symbolic_width", [node("Relu", ["x"], ["y"])], [image(w="W")], "y")

# ---- a hostile run's models: well-formed ONNX the importer crashed on or took wrongly ----
one_conv("err_same_stride_zero", [], "c", auto_pad="SAME_UPPER", strides=[0, 0])
one_conv("err_group_huge", [], "c", group=2**62)
save("err_tied_weights", [
    node("Gemm", ["x", "w"], ["h"], transB=1), node("Relu", ["h"], ["r"]),
    node("Gemm", ["r", "w"], ["y"], transB=1),
], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y", [init("w", 6, 6)])
save("err_weight_nan", [node("Gemm", ["x", "w"], ["y"], transB=1)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y",
     [numpy_helper.from_array(np.full((4, 6), np.nan, dtype=np.float32), "w")])
save("err_alpha_inf", [node("Gemm", ["x", "w"], ["y"], transB=1, alpha=float("inf"))],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y", [init("w", 4, 6)])
one_conv("err_bn_negative_var", [
    node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"])], "bn",
    [init("s", 2), init("b", 2), init("m", 2),
     numpy_helper.from_array(np.array([1.0, -0.5], dtype=np.float32), "v")])
short = init("w", 4, 6)
short.raw_data = b"\0" * 8  # 8 bytes for 96
save("err_short_raw_data", [node("Gemm", ["x", "w"], ["y"], transB=1)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y", [short])
save("err_reshape_overflow", [
    node("Flatten", ["x"], ["f"]), node("Reshape", ["f", "shape"], ["r"])],
     [image()], "r", [ints("shape", [-1, 2**62, 4])])
save("err_zero_channels", [node("Relu", ["x"], ["y"])], [image(c=0)], "y")

# A second hostile run's (session 32).
# An Identity passing a weight on: bound as the initializer it passes (tied weights through it
# are refused; export writes the initializer, which it could not find by the Identity's name).
save("err_tied_identity", [
    node("Gemm", ["x", "w"], ["h"], transB=1), node("Relu", ["h"], ["r"]),
    node("Identity", ["w"], ["w2"]), node("Gemm", ["r", "w2"], ["y"], transB=1),
], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y", [init("w", 6, 6)])
save("gemm_identity_weight", [
    node("Identity", ["w"], ["w2"]), node("Gemm", ["x", "w2", "c"], ["y"], transB=1),
], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y",
    [init("w", 4, 6), init("c", 4)])
# Scales that do not divide back exactly (export sets them to 1), and one that leaves float's
# range once folded into the weights.
save("gemm_odd_scale", [node("Gemm", ["x", "w", "c"], ["y"], alpha=3.0, beta=0.7)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y",
     [init("w", 6, 4), init("c", 4)])
save("err_alpha_tiny", [node("Gemm", ["x", "w"], ["y"], transB=1, alpha=1e-45)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y", [init("w", 4, 6)])
# A Linear's bias written as a Constant node between its MatMul and its Add.
save("matmul_late_bias", [
    node("MatMul", ["x", "w"], ["m"]),
    node("Constant", [], ["b"], value=init("b_value", 3)),
    node("Add", ["m", "b"], ["y"]),
], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y", [init("w", 6, 3)])
# Finite weights whose outputs overflow: eval's loss is NaN, an error (it printed -nan, exit 0).
save("huge_weights", [node("Gemm", ["x", "w"], ["y"], transB=1)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y",
     [numpy_helper.from_array(np.full((4, 6), 3e38, dtype=np.float32), "w")])
# Session 42's hostile run. The default domain imported twice, as '' 13 and 'ai.onnx' 11: the
# checker validates the Softmax by its own spelling (13), the importer read the last (11).
graph = helper.make_graph(
    [node("Softmax", ["x"], ["y"], axis=1)], "err_opset_twice", [image(c=3, h=2, w=2)],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 2, 2])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                helper.make_opsetid("ai.onnx", 11)])
onnx.checker.check_model(model)
onnx.save(model, os.path.join(OUT, "err_opset_twice.onnx"))
# LRN with a negative alpha: refused at import, not by the kernel (exit 3 after plan said fits).
one_conv("err_lrn_negative_alpha",
         [node("LRN", ["c"], ["l"], size=3, alpha=-1e-4, beta=0.75, bias=1.0)], "l")
# allowzero with a 0 first: an empty tensor, taken for the batch where the batch is symbolic.
save("err_reshape_zero_batch", [node("Reshape", ["x", "shape"], ["r"], allowzero=1)], [image()],
     "r", [ints("shape", [0, 192])], opset=14)
# The only graph input is also an initializer: the advice was to give the others as ones.
save("err_input_is_initializer", [node("Relu", ["x"], ["y"])],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y", [init("x", 2, 6)])
# transA = -1 was reported as "transA = 1".
save("err_gemm_trans_a_negative", [node("Gemm", ["x", "w"], ["y"], transA=-1)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y", [init("w", 6, 4)])
# A weight stored in a side file: refused before the checker looks for the file (the message
# depended on the working directory and told whether a path exists). Not checked here either.
external = init("w", 4, 6)
external.ClearField("raw_data")
external.data_location = TensorProto.EXTERNAL
external.external_data.add(key="location", value="/etc/passwd")
graph = helper.make_graph(
    [node("Gemm", ["x", "w"], ["y"], transB=1)], "err_external_data",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [external])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
          os.path.join(OUT, "err_external_data.onnx"))
# A weight stored as a sparse initializer (not read: it was said to be computed by the graph).
sparse = helper.make_sparse_tensor(
    numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "w"),
    numpy_helper.from_array(np.array([0, 5], dtype=np.int64), "w_indices"), [4, 6])
graph = helper.make_graph(
    [node("Gemm", ["x", "w"], ["y"], transB=1)], "err_sparse_weight",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], sparse_initializer=[sparse])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(model)
onnx.save(model, os.path.join(OUT, "err_sparse_weight.onnx"))
# A Linear's bias passed on by an Identity written between its MatMul and its Add.
save("matmul_late_identity_bias", [
    node("MatMul", ["x", "w"], ["m"]),
    node("Identity", ["b"], ["b2"]),
    node("Add", ["m", "b2"], ["y"]),
], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y",
    [init("w", 6, 3), init("b", 3)])
# A node named as the loss layer memweave appends would be: the appended one takes another name.
save("node_named_loss", [
    node("Gemm", ["x", "w"], ["h"], transB=1), node("Relu", ["h"], ["r"], name="y_loss"),
    node("Gemm", ["r", "w2"], ["y"], transB=1),
], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], "y",
    [init("w", 6, 6), init("w2", 4, 6)])
# A map of scores per position (a segmentation head's): trained as one classification over the
# image's every score, with a warning.
save("score_map", [node("Conv", ["x", "w"], ["y"])], [image()], "y", [init("w", 2, 3, 3, 3)],
     out_shape=("N", 2, 6, 6))
# The batch read by four layers, and a chain from one of them (MaxPool -> Conv -> BN -> Conv)
# that `all` drops and rebuilds late in backward, after the batch's last reader: at 0.75 x
# liveness's peak a rebuild left to demand had to replay the chain from the dead batch.
save("batch_fans_out", [
    node("MaxPool", ["x"], ["mp"], kernel_shape=[2, 2], strides=[1, 1]),
    node("Conv", ["mp", "c2_w", "c2_b"], ["c2"], pads=[1, 1, 1, 1]),
    node("BatchNormalization", ["c2", "bn3_s", "bn3_b", "bn3_m", "bn3_v"], ["bn3"]),
    node("Conv", ["x", "c4_w"], ["c4"]),
    node("Conv", ["bn3", "c5_w"], ["c5"], pads=[1, 1, 1, 1]),
    node("AveragePool", ["c5"], ["ap6"], kernel_shape=[3, 3], strides=[2, 2]),
    node("Dropout", ["x"], ["d7"]),
    node("Conv", ["d7", "c8_w", "c8_b"], ["c8"], dilations=[2, 2]),
    node("Conv", ["c8", "c9_w"], ["c9"]),
    node("Conv", ["c5", "c10_w", "c10_b"], ["c10"], group=4),
    node("Identity", ["c8"], ["id11"]),
    node("BatchNormalization", ["id11", "bn12_s", "bn12_b", "bn12_m", "bn12_v"], ["bn12"]),
    node("Dropout", ["c8"], ["d13"]),
    node("Conv", ["d13", "c14_w", "c14_b"], ["c14"]),
    node("AveragePool", ["mp"], ["ap15"], kernel_shape=[3, 3], strides=[2, 2],
         pads=[1, 1, 1, 1], count_include_pad=1),
    node("Relu", ["x"], ["r16"]),
] + [node("GlobalAveragePool", [t], ["g_" + t])
     for t in ("c4", "ap6", "c9", "c10", "bn12", "c14", "ap15", "r16")] + [
    node("Concat", ["g_" + t for t in ("c4", "ap6", "c9", "c10", "bn12", "c14", "ap15", "r16")],
         ["cat"], axis=1),
    node("Flatten", ["cat"], ["flat"]),
    node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1),
], [image()], "y", [
    init("c2_w", 4, 3, 3, 3), init("c2_b", 4),
    init("bn3_s", 4), init("bn3_b", 4), init("bn3_m", 4), numpy_helper.from_array(RNG.uniform(0.5, 2, 4).astype(np.float32), "bn3_v"),
    init("c4_w", 8, 3, 5, 5), init("c5_w", 4, 4, 3, 3),
    init("c8_w", 2, 3, 3, 3), init("c8_b", 2), init("c9_w", 6, 2, 1, 1),
    init("c10_w", 4, 1, 1, 1), init("c10_b", 4),
    init("bn12_s", 2), init("bn12_b", 2), init("bn12_m", 2), numpy_helper.from_array(RNG.uniform(0.5, 2, 2).astype(np.float32), "bn12_v"),
    init("c14_w", 6, 2, 1, 1), init("c14_b", 6), init("fc_w", 3, 36), init("fc_b", 3),
])
