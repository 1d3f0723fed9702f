#!/usr/bin/env python3
"""Write a GGUF v3 file with a real model's shape but no weights (a sparse file).

The tensor data region is left as a hole (the file is truncated to its full
size), so an 8B-shaped file costs no disk space and is written instantly. It
is for checking what needs only the shapes: `pagechat info` and the memory
plan. Standard library only.

Example:
  python3 gen_shape_gguf.py --dim 4096 --layers 32 --heads 32 --kv-heads 8 \
      --ffn 14336 --vocab 128256 --type q4_k --out llama3-8b-shape.gguf
"""
import argparse
import struct

T_UINT32, T_FLOAT32, T_STRING = 4, 6, 8
TYPES = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q8_0": (8, 32, 34), "q4_k": (12, 256, 144),
         "q6_k": (14, 256, 210)}


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv_u32(k, v):
    return s(k) + struct.pack("<II", T_UINT32, v)


def kv_f32(k, v):
    return s(k) + struct.pack("<If", T_FLOAT32, v)


def kv_str(k, v):
    return s(k) + struct.pack("<I", T_STRING) + s(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, dflt in (("dim", 4096), ("layers", 32), ("heads", 32), ("kv-heads", 8), ("ffn", 14336),
                       ("vocab", 128256), ("ctx", 8192)):
        ap.add_argument("--" + name, type=int, default=dflt)
    ap.add_argument("--type", choices=sorted(TYPES), default="q4_k")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    hd = a.dim // a.heads
    kvs = [kv_str("general.architecture", "llama"), kv_str("general.name", "shape-only"),
           kv_u32("llama.embedding_length", a.dim), kv_u32("llama.block_count", a.layers),
           kv_u32("llama.feed_forward_length", a.ffn), kv_u32("llama.attention.head_count", a.heads),
           kv_u32("llama.attention.head_count_kv", a.kv_heads), kv_u32("llama.context_length", a.ctx),
           kv_u32("llama.vocab_size", a.vocab), kv_f32("llama.rope.freq_base", 500000.0),
           kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)]
    mat = a.type
    tensors = [("token_embd.weight", (a.dim, a.vocab), mat), ("output_norm.weight", (a.dim,), "f32"),
               ("output.weight", (a.dim, a.vocab), "q6_k" if mat == "q4_k" else mat)]
    for l in range(a.layers):
        p = "blk.%d." % l
        tensors += [(p + "attn_norm.weight", (a.dim,), "f32"), (p + "ffn_norm.weight", (a.dim,), "f32"),
                    (p + "attn_q.weight", (a.dim, a.heads * hd), mat),
                    (p + "attn_k.weight", (a.dim, a.kv_heads * hd), mat),
                    (p + "attn_v.weight", (a.dim, a.kv_heads * hd), mat),
                    (p + "attn_output.weight", (a.heads * hd, a.dim), mat),
                    (p + "ffn_gate.weight", (a.dim, a.ffn), mat), (p + "ffn_up.weight", (a.dim, a.ffn), mat),
                    (p + "ffn_down.weight", (a.ffn, a.dim), mat)]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offset, infos = 0, []
    for name, ne, t in tensors:
        tid, blk, nbytes = TYPES[t]
        n = 1
        for d in ne:
            n *= d
        infos.append(s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
                     + struct.pack("<IQ", tid, offset))
        offset += (n // blk * nbytes + 31) // 32 * 32
    head += b"".join(infos)
    head += b"\0" * ((32 - len(head) % 32) % 32)
    with open(a.out, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)


if __name__ == "__main__":
    main()
