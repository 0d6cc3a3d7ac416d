"""Write a tiny llama-architecture GGUF with seeded random weights, for the real-engine tests.

    python make_tiny_gguf.py OUT.gguf

Needs `gguf` (llama.cpp's gguf-py) and numpy; tests/realengine/build.sh runs it in a venv of its own
with pinned versions. The file is the same bytes on every run: the weights come from
numpy's PCG64 with a fixed seed, the vocabulary from fixed lists.

The model is 2 layers of 64 dimensions with a SentencePiece-style ("llama") vocabulary of
1024 pieces: the three specials, the 256 byte-fallback tokens, printable ASCII (alone and after
the word-start marker), and common English words with all their prefixes (the SPM tokenizer
merges adjacent pieces only into pieces that exist). Random weights mean it answers gibberish: a needle probe against it MISSes.
"""

import string
import sys

import gguf
import numpy as np

SEED = 17
N_VOCAB = 1024
N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX_TRAIN = 8192
SPACE = "\u2581"  # SentencePiece's word-start marker

WORDS = (
    "the of and to in is was that for it with as on be at by this had not are but from or have an they which "
    "one you were her all she there would their we him been has when who will more no if out so said what up "
    "its about into than them can only other new some could time these two may then do first any my now such "
    "like our over man me even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very make world still own "
    "see men work long get here between both life being under never day same another know while last might "
    "us great old year off come since against go came right used take three number value secret code city "
    "name answer question text document remember key passage word river mountain garden window morning"
).split()

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def vocabulary():
    """(pieces, scores, types): specials, bytes, then pieces by length so merges climb to whole words."""
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    normal = [SPACE] + [chr(c) for c in range(0x21, 0x7F)] + [SPACE + c for c in string.ascii_letters + string.digits]
    for word in WORDS:
        marked = SPACE + word
        normal += [marked[:i] for i in range(2, len(marked) + 1)]
    seen = set(pieces)
    ordered = []
    for piece in normal:
        if piece not in seen:
            seen.add(piece)
            ordered.append(piece)
    ordered = ordered[: N_VOCAB - len(pieces)]
    filler = N_VOCAB - len(pieces) - len(ordered)
    ordered += [f"<unused{i}>" for i in range(filler)]
    scores = [0.0] * len(pieces)
    for i, piece in enumerate(ordered):
        # SPM merges the highest-scoring pair first: longer pieces win, earlier ones break ties.
        scores.append(float(len(piece)) - i * 1e-4 if not piece.startswith("<unused") else -1e4)
    types += [gguf.TokenType.UNUSED if p.startswith("<unused") else gguf.TokenType.NORMAL for p in ordered]
    return pieces + ordered, scores, types


def tensors(rng):
    head_dim = N_EMBD // N_HEAD

    def w(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out = {"token_embd.weight": w(N_VOCAB, N_EMBD, scale=1.0)}
    for i in range(N_LAYER):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        out[p + "attn_q.weight"] = w(N_EMBD, N_EMBD)
        out[p + "attn_k.weight"] = w(N_HEAD_KV * head_dim, N_EMBD)
        out[p + "attn_v.weight"] = w(N_HEAD_KV * head_dim, N_EMBD)
        out[p + "attn_output.weight"] = w(N_EMBD, N_EMBD)
        out[p + "ffn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        out[p + "ffn_gate.weight"] = w(N_FF, N_EMBD)
        out[p + "ffn_up.weight"] = w(N_FF, N_EMBD)
        out[p + "ffn_down.weight"] = w(N_EMBD, N_FF)
    out["output_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
    out["output.weight"] = w(N_VOCAB, N_EMBD, scale=1.0)
    return out


def write(path):
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("sparkops-tiny-random")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(N_VOCAB)
    pieces, scores, types = vocabulary()
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, array in tensors(np.random.Generator(np.random.PCG64(SEED))).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_gguf.py OUT.gguf")
    write(sys.argv[1])
