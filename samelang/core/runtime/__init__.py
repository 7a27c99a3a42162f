"""The runtime: how a model runs, apart from what it is for. The inference engine and its heads,
the precision chosen per device, the ONNX export and int8 quantisation. The model roles in
:mod:`samelang.core.models` run on it."""
