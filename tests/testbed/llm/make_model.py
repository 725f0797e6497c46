# A tiny llama-architecture GGUF model with random weights and the
# vocabulary of a vocabulary-only GGUF from llama.cpp's sources.
#   python make_model.py VOCAB.gguf OUT.gguf [n_embd] [n_layer] [n_ctx]
import sys
import numpy as np
import gguf

vocab_path, out_path = sys.argv[1], sys.argv[2]
n_embd = int(sys.argv[3]) if len(sys.argv) > 3 else 256
n_layer = int(sys.argv[4]) if len(sys.argv) > 4 else 4
n_ctx = int(sys.argv[5]) if len(sys.argv) > 5 else 16384
n_head, n_ff = 8, 4 * n_embd

r = gguf.GGUFReader(vocab_path)
w = gguf.GGUFWriter(out_path, "llama")
w.add_name("causeway-tiny")
w.add_context_length(n_ctx)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_head)
w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(n_embd // n_head)
w.add_file_type(gguf.LlamaFileType.ALL_F32)
n_vocab = 0
for name, field in r.fields.items():
    if not name.startswith("tokenizer."):
        continue
    t = field.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        et = field.types[-1]
        vals = [field.parts[i] for i in field.data]
        if et == gguf.GGUFValueType.STRING:
            vals = [bytes(v).decode("utf-8", errors="replace") for v in vals]
        else:
            vals = [v.tolist()[0] for v in vals]
        if name == "tokenizer.ggml.tokens":
            n_vocab = len(vals)
        w.add_key_value(name, vals, t, sub_type=et)
    elif t == gguf.GGUFValueType.STRING:
        w.add_key_value(name, bytes(field.parts[field.data[0]]).decode(), t)
    else:
        w.add_key_value(name, field.parts[field.data[0]].tolist()[0], t)
rng = np.random.default_rng(7)
def t(name, *shape, scale=0.02):
    w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))
t("token_embd.weight", n_vocab, n_embd)
w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
t("output.weight", n_vocab, n_embd)
for i in range(n_layer):
    w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
        t(f"blk.{i}.{n}.weight", n_embd, n_embd)
    t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
    t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
    t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"wrote {out_path}: vocab {n_vocab}, {n_layer} layers of {n_embd}")
