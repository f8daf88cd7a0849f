"""The inputs the experiments write before they run: token blocks, synthetic chats, a prompt.

Each function writes files and returns nothing; torch, transformers and pyarrow are imported
only by the functions that need them.
"""
import json
import os
import random
import struct

WORDS = ("the model trains on every GPU of one machine with fp32 master weights and bf16 compute "
         "gradients shard across ranks Grüße 世界 données модель 🙂 naïve").split()


def chat_blocks(tokenizer_dir, chats, path, seq, blocks, exact=True):
    """BLOCKS blocks of SEQ tokens as safetensors input_ids [N, SEQ]: each chat of CHATS
    ({"messages": [...]} rows) rendered by the tokenizer's chat template, tokenized without
    special tokens, concatenated and cut. With exact, too few tokens is an error; otherwise as
    many whole blocks as there are."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids = []
    for line in open(chats):
        if line.strip():
            text = tok.apply_chat_template(json.loads(line)["messages"], tokenize=False)
            ids += tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) >= seq * blocks:
            break
    if exact and len(ids) < seq * blocks:
        raise SystemExit("only %d tokens in %s: %d blocks of %d need more" % (len(ids), chats, blocks, seq))
    n = min(blocks, len(ids) // seq)
    save_file({"input_ids": torch.tensor(ids[: n * seq], dtype=torch.int64).view(n, seq)}, str(path))
    print("blocks: %d x %d tokens" % (n, seq))


def random_blocks(path, n, seq, vocab):
    """N x SEQ random token ids below VOCAB as safetensors input_ids (the standard library only)."""
    header = json.dumps({"input_ids": {"dtype": "I64", "shape": [n, seq], "data_offsets": [0, 8 * n * seq]}}).encode()
    header += b" " * (-len(header) % 8)
    rng = random.Random(0)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for _ in range(n):
            f.write(struct.pack("<%dq" % seq, *(rng.randrange(vocab) for _ in range(seq))))


def _say(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _short_chats(rng, n):
    """N chats of 2-6 turns of 5-80 words, mixed ASCII and non-ASCII."""
    return [[{"role": "user" if t % 2 == 0 else "assistant", "content": _say(rng, rng.randint(5, 80))}
             for t in range(rng.randint(2, 6))] for _ in range(n)]


def _write_chats(path, chats):
    with open(path, "w", encoding="utf-8") as f:
        for c in chats:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")


def padding_chats(folder):
    """Two seeded sets: speed.jsonl (20,000 short chats) and capybara_like.jsonl (16,000 rows of
    1-5 exchanges, user turns of lognormal(3.5, 0.9) words, assistant turns of lognormal(5.0,
    0.7): some rows longer than 2048 tokens)."""
    rng = random.Random(0)
    _write_chats(os.path.join(folder, "speed.jsonl"), _short_chats(rng, 20000))
    capy = []
    for _ in range(16000):
        msgs = []
        for _ in range(rng.randint(1, 5)):
            msgs.append({"role": "user", "content": _say(rng, max(3, int(rng.lognormvariate(3.5, 0.9))))})
            msgs.append({"role": "assistant", "content": _say(rng, max(3, int(rng.lognormvariate(5.0, 0.7))))})
        capy.append(msgs)
    _write_chats(os.path.join(folder, "capybara_like.jsonl"), capy)


def parquet_and_jsonl_chats(folder, n):
    """N short chats as chats.jsonl and as chats.parquet (pyarrow's defaults: snappy, dictionary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [{"messages": c} for c in _short_chats(random.Random(0), n)]
    _write_chats(os.path.join(folder, "chats.jsonl"), [r["messages"] for r in rows])
    pq.write_table(pa.Table.from_pylist(rows), os.path.join(folder, "chats.parquet"))


def uncache(folder):
    """Drops a folder's files from the page cache, so that the next read goes to the disk."""
    for root, _, files in os.walk(folder):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def decode_prompt(model_dir, path, tokens):
    """A prompt of TOKENS random ids for the model of MODEL_DIR, as {"input_ids": [...]} in PATH;
    the folder's eos ids removed, so that generation runs for every token asked."""
    for name in ("config.json", "generation_config.json"):
        p = os.path.join(model_dir, name)
        if os.path.exists(p):
            j = json.load(open(p))
            j["eos_token_id"] = None
            json.dump(j, open(p, "w"), indent=2)
    vocab = json.load(open(os.path.join(model_dir, "config.json")))["vocab_size"]
    rng = random.Random(0)
    json.dump({"input_ids": [rng.randrange(vocab) for _ in range(tokens)]}, open(path, "w"))


# Common English words, each one token of the Qwen3 tokenizer with or without its leading space.
PAIR_WORDS = (
    "the of and to in is was for on that with as by at from his her which or an be are this had not but were they "
    "have one all their there been has when who more will would no if out so said what up its about into than them "
    "can only other new some could time these two may then do first any my now such like our over man me even most "
    "made after also did many before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work long get here between both "
    "life being under never day same another know while last might us great old year off come since against go "
    "came right used take three").split()


def preference_pairs(path, n, seed=0):
    """N conversational preference rows (TRL's prompt/chosen/rejected, one message each) of random
    words as JSONL: the prompt 300-400 words of all PAIR_WORDS; chosen and rejected 500-600 words
    each, every chosen word one of the even-indexed PAIR_WORDS with the pair's chance q (else an
    odd-indexed one) and every rejected word one of them with chance 1 - q, q uniform in [0.5, 1]:
    a preference a model learns, strong in some pairs and absent in others, so the mean loss falls
    gradually rather than all at once. Under the Qwen3 chat template a pair is 2 x prompt + chosen
    + rejected + 28 tokens, 1,628-2,028: each pair fills most of a 2,048-token sequence alone. The
    rows are written longest pair first, ties in the order drawn: the order of anvil's
    best-fit-decreasing blocks (one pair each), so that a trainer reading the file in order sees
    anvil's batches."""
    rng = random.Random(seed)
    even, odd = PAIR_WORDS[0::2], PAIR_WORDS[1::2]
    say = lambda k, q: " ".join(rng.choice(even if rng.random() < q else odd) for _ in range(k))
    rows = []
    for _ in range(n):
        p, c, r, q = rng.randint(300, 400), rng.randint(500, 600), rng.randint(500, 600), rng.uniform(0.5, 1.0)
        rows.append((2 * p + c + r + 28, {"prompt": [{"role": "user", "content": say(p, 0.5)}],
                                          "chosen": [{"role": "assistant", "content": say(c, q)}],
                                          "rejected": [{"role": "assistant", "content": say(r, 1 - q)}]}))
    rows.sort(key=lambda t: -t[0])  # stable: ties in the order drawn
    with open(path, "w") as f:
        for _, row in rows:
            f.write(json.dumps(row) + "\n")
